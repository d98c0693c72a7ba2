//! One pub/sub connection per store that wakes the waiters of a key.
//!
//! Completions and releases publish the key's digest on the store's wake
//! channel, but only when a waiter marked the record (see `claim.lua`):
//! a completion nobody waits for costs its one round trip and nothing more.
//! Messages can be lost (the connection drops, the server fails over), so a
//! waiter also looks again when the holder's lease would run out, and at
//! least every [`RECHECK_EVERY`](super::RECHECK_EVERY); a listener that goes
//! down wakes every waiter at once.

use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use futures_util::StreamExt;
use tokio::sync::watch;

/// How long the listener may take to connect and subscribe.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Down,
    Connecting,
    Up,
}

/// The subscribed connection's state and the per-key channels it wakes.
pub(super) struct Listener {
    client: redis::Client,
    channel: String,
    status: watch::Sender<Status>,
    waiters: DashMap<[u8; 32], watch::Sender<()>>,
    /// Dropped with the listener, which ends its session.
    stop: watch::Sender<()>,
}

impl Listener {
    pub(super) fn new(client: redis::Client, channel: String) -> Arc<Listener> {
        Arc::new(Listener {
            client,
            channel,
            status: watch::Sender::new(Status::Down),
            waiters: DashMap::new(),
            stop: watch::Sender::new(()),
        })
    }

    /// Whether the connection is subscribed now.
    pub(super) fn is_up(&self) -> bool {
        *self.status.borrow() == Status::Up
    }

    /// Starts a session if none is running (and a runtime is).
    pub(super) fn ensure(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let start = self.status.send_if_modified(|status| {
            if *status == Status::Down {
                *status = Status::Connecting;
                true
            } else {
                false
            }
        });
        if start {
            handle.spawn(listen(
                Arc::downgrade(self),
                self.stop.subscribe(),
                self.client.clone(),
                self.channel.clone(),
            ));
        }
    }

    /// Waits until subscribed; `false` if the attempt failed.
    pub(super) async fn up(self: &Arc<Self>) -> bool {
        self.ensure();
        let mut status = self.status.subscribe();
        loop {
            match *status.borrow_and_update() {
                Status::Up => return true,
                Status::Down => return false,
                Status::Connecting => {}
            }
            if status.changed().await.is_err() {
                return false;
            }
        }
    }

    /// Subscribes to one key's wake-ups, before its claim is sent.
    pub(super) fn watch(self: &Arc<Self>, digest: [u8; 32]) -> KeyWatch {
        let rx = self
            .waiters
            .entry(digest)
            .or_insert_with(|| watch::Sender::new(()))
            .subscribe();
        KeyWatch {
            listener: Arc::clone(self),
            digest,
            rx: Some(rx),
        }
    }

    fn notify(&self, payload: &[u8]) {
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(payload, &mut digest).is_err() {
            return;
        }
        if let Some(waiters) = self.waiters.get(&digest) {
            waiters.send_replace(());
        }
    }

    /// Wakes every waiter: messages may have been lost.
    fn wake_all(&self) {
        for waiters in self.waiters.iter() {
            waiters.send_replace(());
        }
    }
}

/// A subscription to one key's wake-ups; unsubscribes when dropped.
pub(super) struct KeyWatch {
    listener: Arc<Listener>,
    digest: [u8; 32],
    rx: Option<watch::Receiver<()>>,
}

impl KeyWatch {
    /// Until the key's wake-up or `nap`, whichever comes first.
    pub(super) async fn until(mut self, nap: Duration) {
        tokio::select! {
            () = self.changed() => {}
            () = tokio::time::sleep(nap) => {}
        }
    }

    async fn changed(&mut self) {
        match self.rx.as_mut() {
            // An error means the sender is gone: wake as well.
            Some(rx) => {
                let _ = rx.changed().await;
            }
            None => std::future::pending().await,
        }
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        drop(self.rx.take());
        self.listener
            .waiters
            .remove_if(&self.digest, |_, sender| sender.receiver_count() == 0);
    }
}

/// Marks the listener down when its session ends, however it ends, and
/// wakes every waiter.
struct DownOnDrop(Weak<Listener>);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if let Some(listener) = self.0.upgrade() {
            listener.status.send_replace(Status::Down);
            listener.wake_all();
        }
    }
}

/// One session: connect, `SUBSCRIBE`, then deliver wake-ups until the
/// connection or the store goes away.
async fn listen(
    listener: Weak<Listener>,
    mut stop: watch::Receiver<()>,
    client: redis::Client,
    channel: String,
) {
    let _down = DownOnDrop(listener.clone());
    let subscribed = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    })
    .await;
    let Ok(Ok(pubsub)) = subscribed else {
        return;
    };
    match listener.upgrade() {
        Some(listener) => {
            listener.status.send_replace(Status::Up);
        }
        None => return,
    }
    let mut messages = pubsub.into_on_message();
    loop {
        tokio::select! {
            message = messages.next() => match (message, listener.upgrade()) {
                (Some(message), Some(listener)) => listener.notify(message.get_payload_bytes()),
                _ => return,
            },
            _ = stop.changed() => return,
        }
    }
}
