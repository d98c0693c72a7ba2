//! The `LISTEN` session: one connection per store that listens on the
//! [`NOTIFY_CHANNEL`] and wakes the waiters of a key, connected on demand
//! and again after it drops.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::watch;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Config, Socket};

use super::{NOTIFY_CHANNEL, RECHECK_EVERY, sql};
use crate::store::durable::wait::{LEASE_MARGIN, Wakeup};

pub(super) type SessionFn = Box<
    dyn Fn(Weak<Listener>, watch::Receiver<()>) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Down,
    Connecting,
    Up,
}

/// One connection that `LISTEN`s for completions, shared by every waiter of
/// a store, and the per-key channels it wakes.
pub(super) struct Listener {
    session: SessionFn,
    status: watch::Sender<Status>,
    waiters: DashMap<[u8; 32], watch::Sender<()>>,
    /// Dropped with the listener, which ends its session.
    stop: watch::Sender<()>,
}

impl Listener {
    pub(super) fn new(session: SessionFn) -> Arc<Listener> {
        Arc::new(Listener {
            session,
            status: watch::Sender::new(Status::Down),
            waiters: DashMap::new(),
            stop: watch::Sender::new(()),
        })
    }

    pub(super) fn is_up(&self) -> bool {
        *self.status.borrow() == Status::Up
    }

    /// Starts a listening session if none is running (and a runtime is).
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
            handle.spawn((self.session)(Arc::downgrade(self), self.stop.subscribe()));
        }
    }

    /// Waits until listening; `false` if the connection attempt failed.
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

    fn notify(&self, payload: &str) {
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(payload, &mut digest).is_err() {
            return;
        }
        if let Some(waiters) = self.waiters.get(&digest) {
            waiters.send_replace(());
        }
    }

    /// Wakes every waiter: notifications may have been lost.
    fn wake_all(&self) {
        for waiters in self.waiters.iter() {
            waiters.send_replace(());
        }
    }
}

/// A subscription to one key's wake-ups; unsubscribes when dropped.
pub struct KeyWatch {
    pub(super) listener: Arc<Listener>,
    digest: [u8; 32],
    rx: Option<watch::Receiver<()>>,
}

impl KeyWatch {
    /// Until the key's notification, the holder's lease running out, or
    /// [`RECHECK_EVERY`], whichever comes first.
    pub(super) async fn until(&mut self, lease_left: Duration) {
        let nap = (lease_left + LEASE_MARGIN).min(RECHECK_EVERY);
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

impl Wakeup for KeyWatch {
    const CONCLUSIVE: bool = true;

    fn woken(&mut self) -> impl Future<Output = ()> + Send {
        self.changed()
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

/// Marks the listener down when its session ends, however it ends (an
/// error, the store dropped, the runtime shut down), and wakes every waiter.
struct DownOnDrop(Weak<Listener>);

impl Drop for DownOnDrop {
    fn drop(&mut self) {
        if let Some(listener) = self.0.upgrade() {
            listener.status.send_replace(Status::Down);
            listener.wake_all();
        }
    }
}

/// One listening session: connect, `LISTEN`, then deliver notifications
/// until the connection or the store goes away.
pub(super) async fn listen<T>(
    listener: Weak<Listener>,
    mut stop: watch::Receiver<()>,
    config: Config,
    tls: T,
) where
    T: MakeTlsConnect<Socket> + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let _down = DownOnDrop(listener.clone());
    let Ok((client, mut connection)) = config.connect(tls).await else {
        return;
    };
    let listen_sql = sql::listen(NOTIFY_CHANNEL);
    let mut listen = pin!(client.batch_execute(&listen_sql));
    let mut listening = false;
    loop {
        tokio::select! {
            done = &mut listen, if !listening => {
                if done.is_err() {
                    return;
                }
                listening = true;
                match listener.upgrade() {
                    Some(listener) => {
                        listener.status.send_replace(Status::Up);
                    }
                    None => return,
                }
            }
            message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                Some(Ok(AsyncMessage::Notification(note))) => match listener.upgrade() {
                    Some(listener) => listener.notify(note.payload()),
                    None => return,
                },
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
            _ = stop.changed() => return,
        }
    }
}
