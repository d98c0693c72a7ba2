//! One pub/sub connection per store that wakes the waiters of a key.
//!
//! Completions and releases publish the key's digest on the store's wake
//! channel, but only when a waiter marked the record (see `claim.lua`):
//! a completion nobody waits for costs its one round trip and nothing more.
//! Messages can be lost (the connection drops, the server fails over), so a
//! waiter also looks again when the holder's lease would run out, and at
//! least every [`RECHECK_EVERY`](super::RECHECK_EVERY); a listener that goes
//! down wakes every waiter at once. The waiters and their wake-ups are the
//! durable stores' [registry](crate::store::durable::waiters).

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;

use crate::store::durable::waiters::{self, Connect, Session};

/// How long the listener may take to connect and subscribe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the listener connects: a pub/sub connection from the store's
/// client, subscribed to its wake channel.
pub(super) struct Subscribe {
    client: redis::Client,
    channel: String,
}

impl Connect for Subscribe {
    fn session(
        &self,
        listener: Weak<Listener>,
        stop: watch::Receiver<()>,
    ) -> impl Future<Output = ()> + Send + 'static {
        listen(
            Session::new(listener, stop),
            self.client.clone(),
            self.channel.clone(),
        )
    }
}

/// The subscribed connection's state and the per-key channels it wakes.
pub(super) type Listener = waiters::Listener<Subscribe>;

/// A subscription to one key's wake-ups; unsubscribes when dropped.
pub(super) type KeyWatch = waiters::KeyWatch<Subscribe>;

impl Listener {
    pub(super) fn new(client: redis::Client, channel: String) -> Arc<Listener> {
        Listener::with(Subscribe { client, channel })
    }
}

impl KeyWatch {
    /// Until the key's wake-up or `nap`, whichever comes first.
    pub(super) async fn until(mut self, nap: Duration) {
        self.woken_or(nap).await;
    }
}

/// One session: connect, `SUBSCRIBE`, then deliver wake-ups until the
/// connection or the store goes away.
async fn listen(mut session: Session<Subscribe>, client: redis::Client, channel: String) {
    let subscribed = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    })
    .await;
    let Ok(Ok(pubsub)) = subscribed else {
        return;
    };
    if !session.up() {
        return;
    }
    let mut messages = pubsub.into_on_message();
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) if session.wake(message.get_payload_bytes()) => {}
                _ => return,
            },
            () = session.stopped() => return,
        }
    }
}
