//! The coalescer alone: who goes at once, who waits and goes together,
//! what a dropped caller leaves.

use std::sync::Mutex;

use tokio::sync::{Notify, Semaphore};

use super::*;

/// An ask keyed by its first field, answered with its second.
struct Echo(u32, u32);

impl Ask for Echo {
    type Key = u32;
    fn key(&self) -> u32 {
        self.0
    }
}

/// Records each batch's answers and holds every batch until let go.
struct Recorder {
    batches: Mutex<Vec<Vec<u32>>>,
    started: Notify,
    let_go: Semaphore,
}

impl Recorder {
    fn new() -> Recorder {
        Recorder {
            batches: Mutex::new(Vec::new()),
            started: Notify::new(),
            let_go: Semaphore::new(0),
        }
    }

    fn run(
        self: &Arc<Self>,
    ) -> impl Fn(Vec<Member<Echo, u32>>) -> futures_run::Boxed + Send + Sync + use<> {
        let me = Arc::clone(self);
        move |batch: Vec<Member<Echo, u32>>| {
            let me = Arc::clone(&me);
            Box::pin(async move {
                me.batches
                    .lock()
                    .expect("lock")
                    .push(batch.iter().map(|m| m.ask.1).collect());
                me.started.notify_one();
                me.let_go.acquire().await.expect("open").forget();
                for member in batch {
                    let answer = member.ask.1;
                    member.answer(answer);
                }
            })
        }
    }

    fn batches(&self) -> Vec<Vec<u32>> {
        self.batches.lock().expect("lock").clone()
    }
}

mod futures_run {
    pub type Boxed = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

fn one_at_a_time() -> Arc<Coalescer<Echo, u32>> {
    Arc::new(Coalescer::new(Limits {
        batch: 8,
        in_flight: 1,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_nothing_in_flight_goes_at_once_and_later_ones_go_together() {
    let coalescer = one_at_a_time();
    let recorder = Arc::new(Recorder::new());
    let first = tokio::spawn({
        let (c, run) = (Arc::clone(&coalescer), recorder.run());
        async move { c.ask(Echo(1, 10), run).await }
    });
    recorder.started.notified().await;
    // While the first is on the wire: three asks, two under one key.
    let mut later = Vec::new();
    for (queued, (key, value)) in [(2, 20), (3, 30), (2, 21)].into_iter().enumerate() {
        let (c, run) = (Arc::clone(&coalescer), recorder.run());
        later.push(tokio::spawn(
            async move { c.ask(Echo(key, value), run).await },
        ));
        // Spawned tasks reach the queue in no set order: each ask is
        // queued before the next is made.
        while coalescer.lock().waiting.len() <= queued {
            tokio::task::yield_now().await;
        }
    }
    recorder.let_go.add_permits(3);
    assert_eq!(first.await.expect("task").expect("answer"), 10);
    let mut answers = Vec::new();
    for task in later {
        answers.push(task.await.expect("task").expect("answer"));
    }
    assert_eq!(answers, [20, 30, 21], "each caller gets its own answer");
    assert_eq!(
        recorder.batches(),
        [vec![10], vec![20, 30], vec![21]],
        "the first alone, then the waiting ones together, one per key"
    );
    assert_eq!(coalescer.lock().in_flight, 0, "the slot is given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_dropped_while_queued_is_never_sent_and_one_dropped_in_flight_drops_its_answer() {
    struct Guarded(Arc<Mutex<Vec<u32>>>, u32);
    impl Drop for Guarded {
        fn drop(&mut self) {
            self.0.lock().expect("lock").push(self.1);
        }
    }
    let undone = Arc::new(Mutex::new(Vec::new()));
    let coalescer: Arc<Coalescer<Echo, Guarded>> = Arc::new(Coalescer::new(Limits {
        batch: 8,
        in_flight: 1,
    }));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let started = Arc::new(Notify::new());
    let let_go = Arc::new(Semaphore::new(0));
    let run = {
        let (undone, sent, started, let_go) = (
            Arc::clone(&undone),
            Arc::clone(&sent),
            Arc::clone(&started),
            Arc::clone(&let_go),
        );
        move |batch: Vec<Member<Echo, Guarded>>| {
            let (undone, sent, started, let_go) = (
                Arc::clone(&undone),
                Arc::clone(&sent),
                Arc::clone(&started),
                Arc::clone(&let_go),
            );
            async move {
                sent.lock()
                    .expect("lock")
                    .extend(batch.iter().map(|m| m.ask.1));
                started.notify_one();
                let_go.acquire().await.expect("open").forget();
                for member in batch {
                    let value = member.ask.1;
                    member.answer(Guarded(Arc::clone(&undone), value));
                }
            }
        }
    };
    let in_flight = tokio::spawn({
        let (c, run) = (Arc::clone(&coalescer), run.clone());
        async move { c.ask(Echo(1, 10), run).await.map(|g| g.1) }
    });
    started.notified().await;
    let queued = tokio::spawn({
        let (c, run) = (Arc::clone(&coalescer), run.clone());
        async move { c.ask(Echo(2, 20), run).await.map(|g| g.1) }
    });
    while coalescer.lock().waiting.is_empty() {
        tokio::task::yield_now().await;
    }
    queued.abort();
    assert!(queued.await.expect_err("aborted").is_cancelled());
    in_flight.abort();
    assert!(in_flight.await.expect_err("aborted").is_cancelled());
    let_go.add_permits(1);
    while coalescer.lock().in_flight > 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        *sent.lock().expect("lock"),
        [10],
        "the queued ask never went"
    );
    assert_eq!(
        *undone.lock().expect("lock"),
        [10],
        "the answer nobody took was dropped, and undone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_panics_fails_its_members_and_frees_its_slot() {
    let coalescer: Arc<Coalescer<Echo, u32>> = one_at_a_time();
    let run = |_batch: Vec<Member<Echo, u32>>| async move {
        panic!("a batch that panics");
    };
    let failed = coalescer.ask(Echo(1, 1), run).await;
    assert!(
        matches!(failed, Err(StoreError::Unavailable(_))),
        "{failed:?}"
    );
    // The slot is given back as the panicking task unwinds.
    while coalescer.lock().in_flight > 0 {
        tokio::task::yield_now().await;
    }
    let ok = coalescer
        .ask(Echo(1, 7), |batch: Vec<Member<Echo, u32>>| async move {
            for member in batch {
                let value = member.ask.1;
                member.answer(value);
            }
        })
        .await
        .expect("a later batch runs");
    assert_eq!(ok, 7);
}

#[test]
fn a_batch_task_dropped_before_it_first_runs_gives_its_slot_back() {
    let coalescer = one_at_a_time();
    let recorder = Arc::new(Recorder::new());
    recorder.let_go.add_permits(1 << 10);

    // An ask polled once on a runtime that shuts down before the batch's
    // task first runs: the task is dropped unpolled.
    let doomed = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    doomed.block_on({
        let (c, run) = (Arc::clone(&coalescer), recorder.run());
        async move {
            let mut ask = std::pin::pin!(c.ask(Echo(1, 10), run));
            std::future::poll_fn(|cx| {
                assert!(ask.as_mut().poll(cx).is_pending(), "the batch is spawned");
                std::task::Poll::Ready(())
            })
            .await;
        }
    });
    drop(doomed);
    assert_eq!(coalescer.lock().in_flight, 0, "the slot is given back");

    // The next ask goes at once.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a runtime");
    let answer = runtime.block_on(coalescer.ask(Echo(2, 20), recorder.run()));
    assert_eq!(answer.expect("an answer"), 20);
    assert_eq!(recorder.batches(), [vec![20]], "the first batch never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_an_ask_waits_for_the_batch_ahead_though_a_slot_is_free() {
    let coalescer = Arc::new(Coalescer::new(Limits {
        batch: 8,
        in_flight: 2,
    }));
    let recorder = Arc::new(Recorder::new());
    let ask = |key: u32| {
        let (c, run) = (Arc::clone(&coalescer), recorder.run());
        tokio::spawn(async move { c.ask(Echo(key, key * 10), run).await })
    };
    // A light load: two asks go at once, side by side.
    let first = ask(1);
    recorder.started.notified().await;
    let second = ask(2);
    recorder.started.notified().await;
    // Both slots taken: three wait.
    let mut three = Vec::new();
    for (queued, key) in [3, 4, 5].into_iter().enumerate() {
        three.push(ask(key));
        while coalescer.lock().waiting.len() <= queued {
            tokio::task::yield_now().await;
        }
    }
    // The first comes back, and its slot takes the three as one batch.
    recorder.let_go.add_permits(1);
    assert_eq!(first.await.expect("task").expect("answer"), 10);
    recorder.started.notified().await;
    // The second comes back; three asks are on the wire, so its slot is
    // given back rather than kept for what comes next.
    recorder.let_go.add_permits(1);
    assert_eq!(second.await.expect("task").expect("answer"), 20);
    while coalescer.lock().in_flight != 1 {
        tokio::task::yield_now().await;
    }
    // A slot is free, but the batch on the wire carries three asks: the
    // next one waits for it, to go with whatever comes meanwhile.
    let last = ask(6);
    while coalescer.lock().waiting.is_empty() && recorder.batches().len() < 4 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        coalescer.lock().waiting.len(),
        1,
        "with a slot free, an ask under load still waits for the batch ahead"
    );
    recorder.let_go.add_permits(2);
    let mut answers = Vec::new();
    for task in three.into_iter().chain([last]) {
        answers.push(task.await.expect("task").expect("answer"));
    }
    assert_eq!(answers, [30, 40, 50, 60]);
    assert_eq!(
        recorder.batches(),
        [vec![10], vec![20], vec![30, 40, 50], vec![60]]
    );
    let queue = coalescer.lock();
    assert_eq!((queue.in_flight, queue.on_wire), (0, 0), "all given back");
}
