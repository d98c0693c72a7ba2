//! `#[identifier]`: a name that reads like the model's wording or a call's
//! id, vouched for as an id. The marker is inert and taken off.

use idempotent_tools::{Outcome, Run, idempotent};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
enum MailError {
    #[error(transparent)]
    Idempotency(#[from] idempotent_tools::Error),
}

/// The subject line is a template's code here, set by the application.
#[derive(Serialize)]
struct MailArgs {
    customer: u64,
    subject: String,
}

#[idempotent(key = "<run>:mail:<args.customer>:<args.subject>")]
async fn send_mail(run: Run, #[identifier] args: MailArgs) -> Result<Outcome<u64>, MailError> {
    Ok(args.customer)
}

/// Mirrors a mail service's JSON, whose `Subject` is a template's code.
#[derive(Serialize)]
#[allow(non_snake_case)]
struct MirroredMail {
    Customer: u64,
    Subject: String,
}

#[idempotent(key = "<run>:mail:<args.Customer>:<args.Subject>")]
async fn send_mirrored(
    run: Run,
    #[identifier] args: MirroredMail,
) -> Result<Outcome<u64>, MailError> {
    Ok(args.Customer)
}

#[idempotent(key = "<run>:label:<text>")]
async fn print_label(run: Run, #[identifier] text: String) -> Result<Outcome<usize>, MailError> {
    Ok(text.len())
}

/// A customer's refund request, filed before any agent saw it: the same on
/// every ask about it.
#[idempotent(key = "<run>:refund:<request_id>")]
async fn refund_request(
    run: Run,
    #[identifier] request_id: u64,
) -> Result<Outcome<u64>, MailError> {
    Ok(request_id)
}

#[derive(Serialize)]
struct Ticket {
    request_id: u64,
}

#[idempotent(key = "<run>:ticket:<ticket.request_id>")]
async fn close_ticket(run: Run, #[identifier] ticket: Ticket) -> Result<Outcome<u64>, MailError> {
    Ok(ticket.request_id)
}

#[tokio::test(flavor = "current_thread")]
async fn identifier_builds_and_runs() -> Result<(), Box<dyn std::error::Error>> {
    let run = Run::new("identifier-1")?;
    let args = MailArgs {
        customer: 7,
        subject: "welcome-v2".into(),
    };
    assert!(send_mail(run.clone(), args).await?.is_fresh());
    let mirrored = MirroredMail {
        Customer: 8,
        Subject: "welcome-v2".into(),
    };
    assert!(send_mirrored(run.clone(), mirrored).await?.is_fresh());
    assert!(
        print_label(run.clone(), "SKU-1182".into())
            .await?
            .is_fresh()
    );
    assert!(refund_request(run.clone(), 7).await?.is_fresh());
    assert!(
        close_ticket(run, Ticket { request_id: 8 })
            .await?
            .is_fresh()
    );
    Ok(())
}
