//! The waiters of a store that wakes them through one listening
//! connection (Postgres `LISTEN`, Redis pub/sub): a registry of waiters by
//! key, woken by a notification that names the key's digest in hex, and
//! all at once when the connection goes down, since notifications may
//! have been lost then.
//!
//! A store gives only how it connects ([`Connect`]): one session that
//! connects, subscribes, reports itself [up](Session::up), hands each
//! notification to [`Session::wake`], and returns when the connection
//! fails or [the store goes](Session::stopped). Sessions start on demand
//! ([`Listener::ensure`]) and again after one ends.
//!
//! No lock is held across an `.await`: the registry's map is only touched
//! in plain calls (subscribe, wake, unsubscribe).

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::watch;

use super::wait::Wakeup;

/// How a store's listener connects: the one thing the stores' listeners
/// do differently.
pub trait Connect: Send + Sync + Sized + 'static {
    /// One listening session; see the [module](self) for what it does.
    /// Build a [`Session`] from the two arguments.
    fn session(
        &self,
        listener: Weak<Listener<Self>>,
        stop: watch::Receiver<()>,
    ) -> impl Future<Output = ()> + Send + 'static;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Down,
    Connecting,
    Up,
}

/// One listening connection's state, shared by every waiter of a store,
/// and the per-key channels it wakes.
pub struct Listener<C> {
    connect: C,
    status: watch::Sender<Status>,
    waiters: DashMap<[u8; 32], watch::Sender<()>>,
    /// Dropped with the listener, which ends its session.
    stop: watch::Sender<()>,
}

impl<C: Connect> Listener<C> {
    /// A listener that connects with `connect`, down until first needed.
    pub(crate) fn with(connect: C) -> Arc<Listener<C>> {
        Arc::new(Listener {
            connect,
            status: watch::Sender::new(Status::Down),
            waiters: DashMap::new(),
            stop: watch::Sender::new(()),
        })
    }

    /// Whether the connection is listening now.
    pub(crate) fn is_up(&self) -> bool {
        *self.status.borrow() == Status::Up
    }

    /// Starts a session if none is running (and a runtime is).
    pub(crate) fn ensure(self: &Arc<Self>) {
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
            let down = DownOnDrop(Arc::downgrade(self));
            let session = self
                .connect
                .session(Arc::downgrade(self), self.stop.subscribe());
            handle.spawn(async move {
                let _down = down;
                session.await;
            });
        }
    }

    /// Waits until listening; `false` if the connection attempt failed.
    pub(crate) async fn up(self: &Arc<Self>) -> bool {
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
    pub(crate) fn watch(self: &Arc<Self>, digest: [u8; 32]) -> KeyWatch<C> {
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
}

impl<C> Listener<C> {
    /// Wakes the waiters of the key whose digest `payload` spells in hex.
    fn notify(&self, payload: &[u8]) {
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
pub struct KeyWatch<C> {
    /// The listener that wakes it.
    pub(crate) listener: Arc<Listener<C>>,
    digest: [u8; 32],
    rx: Option<watch::Receiver<()>>,
}

impl<C: Connect> KeyWatch<C> {
    /// Until the key's wake-up or `nap`, whichever comes first.
    pub(crate) async fn woken_or(&mut self, nap: Duration) {
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

/// A wake-up names the key waited on, so it is conclusive.
impl<C: Connect> Wakeup for KeyWatch<C> {
    const CONCLUSIVE: bool = true;

    fn woken(&mut self) -> impl Future<Output = ()> + Send {
        self.changed()
    }
}

impl<C> Drop for KeyWatch<C> {
    fn drop(&mut self) {
        drop(self.rx.take());
        self.listener
            .waiters
            .remove_if(&self.digest, |_, sender| sender.receiver_count() == 0);
    }
}

/// What a running session reports to: its listener, held weakly so that
/// the store can go, and the signal that it went.
pub struct Session<C> {
    listener: Weak<Listener<C>>,
    stop: watch::Receiver<()>,
}

impl<C> Session<C> {
    /// The session [`Connect::session`] was asked for.
    pub(crate) fn new(listener: Weak<Listener<C>>, stop: watch::Receiver<()>) -> Session<C> {
        Session { listener, stop }
    }

    /// Marks the listener up; `false` if the store is gone (end the
    /// session).
    pub(crate) fn up(&self) -> bool {
        match self.listener.upgrade() {
            Some(listener) => {
                listener.status.send_replace(Status::Up);
                true
            }
            None => false,
        }
    }

    /// Wakes the waiters of the key a notification names; `false` if the
    /// store is gone (end the session).
    pub(crate) fn wake(&self, payload: &[u8]) -> bool {
        match self.listener.upgrade() {
            Some(listener) => {
                listener.notify(payload);
                true
            }
            None => false,
        }
    }

    /// Resolves when the store is dropped.
    pub(crate) async fn stopped(&mut self) {
        let _ = self.stop.changed().await;
    }
}

/// Marks the listener down when its session ends, however it ends (an
/// error, the store dropped, the runtime shut down, even before it ran),
/// and wakes every waiter.
struct DownOnDrop<C>(Weak<Listener<C>>);

impl<C> Drop for DownOnDrop<C> {
    fn drop(&mut self) {
        if let Some(listener) = self.0.upgrade() {
            listener.status.send_replace(Status::Down);
            listener.wake_all();
        }
    }
}
