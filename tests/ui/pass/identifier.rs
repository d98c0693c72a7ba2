//! `#[identifier]`: a name that reads like the model's wording, vouched for
//! as an id. The marker is inert and taken off.

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

#[idempotent(key = "<run>:label:<text>")]
async fn print_label(run: Run, #[identifier] text: String) -> Result<Outcome<usize>, MailError> {
    Ok(text.len())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), MailError> {
    let run = Run::new("run-1")?;
    let args = MailArgs {
        customer: 7,
        subject: "welcome-v2".into(),
    };
    assert!(send_mail(run.clone(), args).await?.is_fresh());
    assert!(print_label(run, "SKU-1182".into()).await?.is_fresh());
    Ok(())
}
