//! The `LISTEN` session: one connection per store that listens on the
//! [`NOTIFY_CHANNEL`] and wakes the waiters of a key, connected on demand
//! and again after it drops. The waiters and their wake-ups are the
//! durable stores' [registry](crate::store::durable::waiters).

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Config, Socket};

use super::{NOTIFY_CHANNEL, RECHECK_EVERY, sql};
use crate::store::durable::wait::LEASE_MARGIN;
use crate::store::durable::waiters::{self, Connect, Session};

pub(super) type SessionFn = Box<
    dyn Fn(Weak<Listener>, watch::Receiver<()>) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// How the listener connects: a session over the store's config and TLS.
pub struct Listen(SessionFn);

impl Connect for Listen {
    fn session(
        &self,
        listener: Weak<Listener>,
        stop: watch::Receiver<()>,
    ) -> impl Future<Output = ()> + Send + 'static {
        (self.0)(listener, stop)
    }
}

/// One connection that `LISTEN`s for completions, shared by every waiter of
/// a store, and the per-key channels it wakes.
pub(super) type Listener = waiters::Listener<Listen>;

/// A subscription to one key's wake-ups; unsubscribes when dropped.
pub type KeyWatch = waiters::KeyWatch<Listen>;

impl Listener {
    pub(super) fn new(session: SessionFn) -> Arc<Listener> {
        Listener::with(Listen(session))
    }
}

impl KeyWatch {
    /// Until the key's notification, the holder's lease running out, or
    /// [`RECHECK_EVERY`], whichever comes first.
    pub(super) async fn until(&mut self, lease_left: Duration) {
        self.woken_or((lease_left + LEASE_MARGIN).min(RECHECK_EVERY))
            .await;
    }
}

/// One listening session: connect, `LISTEN`, then deliver notifications
/// until the connection or the store goes away.
pub(super) async fn listen<T>(
    listener: Weak<Listener>,
    stop: watch::Receiver<()>,
    config: Config,
    tls: T,
) where
    T: MakeTlsConnect<Socket> + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let mut session = Session::new(listener, stop);
    let Ok((client, mut connection)) = config.connect(tls).await else {
        return;
    };
    let listen_sql = sql::listen(NOTIFY_CHANNEL);
    let mut listen = pin!(client.batch_execute(&listen_sql));
    let mut listening = false;
    loop {
        tokio::select! {
            done = &mut listen, if !listening => {
                if done.is_err() || !session.up() {
                    return;
                }
                listening = true;
            }
            message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                Some(Ok(AsyncMessage::Notification(note))) => {
                    if !session.wake(note.payload().as_bytes()) {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
            () = session.stopped() => return,
        }
    }
}
