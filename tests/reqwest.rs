//! The HTTP client side, against a provider of the test's own on the
//! loopback that takes no idempotency key and counts what reached it: the
//! call's key arrives as the `Idempotency-Key` header, failures are sorted
//! by when they happened, and a refund whose answer is lost is not made
//! again by the retry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idempotent_tools::call::{Call, Key};
use idempotent_tools::reqwest::{IdempotencyKey, RequestBuilderExt, status_failure};
use idempotent_tools::{Classify, Error, Failure, MemoryStore};
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the provider does with a request, once it has read it whole.
#[derive(Clone, Copy)]
enum Answer {
    /// Refunds, and answers 200.
    Refund,
    /// Refunds, then drops the connection without an answer.
    RefundThenDrop,
    /// Answers with this status, refunding nothing.
    Status(u16),
    /// Keeps the connection open and never answers.
    Never,
}

/// A provider on the loopback: each request's headers go to `seen`, each
/// refund is counted.
struct Provider {
    url: String,
    refunds: Arc<AtomicUsize>,
    seen: mpsc::UnboundedReceiver<String>,
}

impl Provider {
    async fn start(answers: Vec<Answer>) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/refunds", listener.local_addr().expect("address"));
        let refunds = Arc::new(AtomicUsize::new(0));
        let (tell, seen) = mpsc::unbounded_channel();
        let counted = refunds.clone();
        tokio::spawn(async move {
            let mut answers = answers.into_iter();
            while let Ok((conn, _)) = listener.accept().await {
                let answer = answers.next().unwrap_or(Answer::Status(500));
                tokio::spawn(serve(conn, answer, counted.clone(), tell.clone()));
            }
        });
        Provider { url, refunds, seen }
    }

    fn refunds(&self) -> usize {
        self.refunds.load(Ordering::SeqCst)
    }
}

async fn serve(
    mut conn: TcpStream,
    answer: Answer,
    refunds: Arc<AtomicUsize>,
    tell: mpsc::UnboundedSender<String>,
) {
    // The request's head (these requests have no body).
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let _ = tell.send(String::from_utf8_lossy(&head).to_lowercase());
    let status = match answer {
        Answer::Refund => {
            refunds.fetch_add(1, Ordering::SeqCst);
            200
        }
        Answer::RefundThenDrop => {
            refunds.fetch_add(1, Ordering::SeqCst);
            return;
        }
        Answer::Status(status) => status,
        Answer::Never => {
            let _ = conn.read(&mut buf).await;
            return;
        }
    };
    let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
    let _ = conn.write_all(reply.as_bytes()).await;
}

fn key(order: &str) -> Key {
    Key::builder()
        .literal("run-1:refund:")
        .and_then(|b| b.part("order_id", order))
        .and_then(|b| b.finish())
        .expect("a key")
}

fn client() -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(IdempotencyKey)
        .build()
}

/// The refund tool's error: the client's, a status, or the guard's.
#[derive(Debug, thiserror::Error)]
enum RefundError {
    #[error("the payment service failed")]
    Http(#[from] reqwest_middleware::Error),
    #[error("the payment service answered {0}")]
    Status(StatusCode),
    #[error(transparent)]
    Idempotency(#[from] Error),
}

impl Classify for RefundError {
    fn failure(&self) -> Failure {
        match self {
            RefundError::Http(err) => err.failure(),
            RefundError::Status(status) => status_failure(*status),
            RefundError::Idempotency(_) => Failure::Definite,
        }
    }
}

/// The refund, as a tool writes it: one POST to the provider.
async fn refund(
    client: &reqwest_middleware::ClientWithMiddleware,
    url: &str,
) -> Result<String, RefundError> {
    let response = client.post(url).send().await?;
    match response.status() {
        StatusCode::OK => Ok("refunded".to_owned()),
        status => Err(RefundError::Status(status)),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_calls_key_reaches_the_provider_as_its_idempotency_key() {
    let mut provider = Provider::start(vec![Answer::Refund, Answer::Refund, Answer::Refund]).await;
    let client = client();
    let store = Arc::new(MemoryStore::new());

    let refunded = Call::new("shop::refund", key("1182"))
        .store(&store)
        .run_classified(refund(&client, &provider.url))
        .await
        .expect("refunded");
    assert!(refunded.is_fresh());
    let head = provider.seen.recv().await.expect("the request");
    assert!(
        head.contains("idempotency-key: run-1:refund:1182\r\n"),
        "{head}"
    );

    // A plain client, by the request builder's method.
    let plain = reqwest::Client::new();
    let plainly = Call::new("shop::refund", key("1183"))
        .store(&store)
        .run(async {
            plain
                .post(&provider.url)
                .idempotency_key()
                .send()
                .await
                .map_err(reqwest_middleware::Error::from)?;
            Ok::<_, RefundError>(())
        })
        .await
        .expect("refunded");
    assert!(plainly.is_fresh());
    let head = provider.seen.recv().await.expect("the request");
    assert!(
        head.contains("idempotency-key: run-1:refund:1183\r\n"),
        "{head}"
    );

    // Outside a guarded action there is no key to send.
    client.post(&provider.url).send().await.expect("sent");
    let head = provider.seen.recv().await.expect("the request");
    assert!(!head.contains("idempotency-key"), "{head}");
    assert_eq!(provider.refunds(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_are_definite_before_the_request_is_sent_and_unknown_after() {
    // Nothing listens on a port just released: the connection is refused.
    let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let refused_url = format!("http://{}/refunds", closed.local_addr().expect("address"));
    drop(closed);
    let refused = client()
        .post(&refused_url)
        .send()
        .await
        .expect_err("refused");
    assert_eq!(refused.failure(), Failure::Definite, "{refused:?}");

    let provider = Provider::start(vec![Answer::Never, Answer::RefundThenDrop]).await;
    let patient = reqwest_middleware::ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(Duration::from_millis(300))
            .build()
            .expect("a client"),
    )
    .build();
    let timed_out = patient
        .post(&provider.url)
        .send()
        .await
        .expect_err("no answer");
    assert_eq!(timed_out.failure(), Failure::Unknown, "{timed_out:?}");
    let dropped = client()
        .post(&provider.url)
        .send()
        .await
        .expect_err("dropped");
    assert_eq!(dropped.failure(), Failure::Unknown, "{dropped:?}");

    assert_eq!(
        status_failure(StatusCode::UNPROCESSABLE_ENTITY),
        Failure::Definite
    );
    assert_eq!(status_failure(StatusCode::CONFLICT), Failure::Unknown);
    assert_eq!(status_failure(StatusCode::BAD_GATEWAY), Failure::Unknown);
    assert_eq!(
        status_failure(StatusCode::TOO_MANY_REQUESTS),
        Failure::Definite
    );
}

/// The provider takes no key: it refunds, then the connection drops before
/// its answer. The tool's error is unknown, so the retry does not refund
/// again; a declined refund (422) is definite, and the retry acts.
#[tokio::test(flavor = "multi_thread")]
async fn a_refund_whose_answer_is_lost_is_not_made_again_by_the_retry() {
    let provider = Provider::start(vec![Answer::RefundThenDrop, Answer::Refund]).await;
    let (client, store) = (client(), Arc::new(MemoryStore::new()));
    let call = || Call::new("shop::refund", key("1182")).store(&store);

    let lost = call().run_classified(refund(&client, &provider.url)).await;
    assert!(matches!(lost, Err(RefundError::Http(_))), "{lost:?}");
    let retry = call().run_classified(refund(&client, &provider.url)).await;
    assert!(
        matches!(
            retry,
            Err(RefundError::Idempotency(Error::UnknownOutcome { .. }))
        ),
        "{retry:?}"
    );
    assert_eq!(provider.refunds(), 1, "one refund reached the customer");

    let declining = Provider::start(vec![Answer::Status(422), Answer::Refund]).await;
    let call = || Call::new("shop::refund", key("1183")).store(&store);
    let declined = call().run_classified(refund(&client, &declining.url)).await;
    assert!(
        matches!(declined, Err(RefundError::Status(_))),
        "{declined:?}"
    );
    let retry = call()
        .run_classified(refund(&client, &declining.url))
        .await
        .expect("the retry acts");
    assert!(retry.is_fresh());
    assert_eq!(declining.refunds(), 1);
}
