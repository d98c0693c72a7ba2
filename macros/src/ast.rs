//! The one value the attribute's pipeline runs over: read the options and
//! the function, resolve the key against the parameters, then expand.
//!
//! Every stage adds its errors to one list, so that a build shows all of a
//! function's mistakes at once; the expansion reads what the stages could
//! make of the function even when some refused it.

use proc_macro2::TokenStream;
use syn::Type;

use crate::errors::Errors;
use crate::item::Item;
use crate::krate::Krate;
use crate::options::{self, Options, Takeover};
use crate::params::{self, Params};
use crate::resolve::{self, KeyPlan};
use crate::signature;
use crate::template::{self, Segment, Template};

/// A guarded function, read and checked.
pub struct Input {
    /// The facade's path, as the user's crate names it.
    pub krate: Krate,
    /// The attribute's options.
    pub options: Options,
    /// The function, with the parameter markers taken off.
    pub item: Item,
    /// The names its parameters bind, and their roles.
    pub params: Params,
    /// The declared return type, if the guard can serve the signature.
    pub ret: Option<Type>,
    /// The key template, if one was given.
    pub template: Option<Template>,
    /// The key the expansion builds, if the template was given.
    pub plan: Option<KeyPlan>,
}

impl Input {
    /// Reads the options and the function and resolves the key. Every
    /// problem goes to `errors`, in the order the stages find them.
    pub fn read(args: TokenStream, mut item: Item, errors: &mut Errors) -> Input {
        let options = options::parse(args, errors);
        let params = params::read(&item.sig, errors);
        check_transaction(&options, &params, errors);
        check_verify(&options, errors);
        let ret = signature::check(&item.sig, errors).cloned();
        let template = options.key.as_ref().map(|lit| template::parse(lit, errors));
        let rmcp_tool = item.rmcp_tool().is_some();
        let plan = options
            .key
            .as_ref()
            .zip(template.as_ref())
            .map(|(lit, t)| resolve::plan(t, &params, &item.sig.ident, rmcp_tool, lit, errors));
        item.strip_markers();
        Input {
            krate: Krate::find(),
            options,
            item,
            params,
            ret,
            template,
            plan,
        }
    }

    /// The names the template's placeholders start with.
    pub fn keyed(&self) -> Vec<&str> {
        self.template
            .iter()
            .flat_map(|t| &t.segments)
            .filter_map(|segment| match segment {
                Segment::Placeholder(p) => Some(p.root.as_str()),
                Segment::Literal(_) => None,
            })
            .collect()
    }
}

/// `takeover = "verify"` and `settle` need a verification to ask; a
/// transaction needs none.
fn check_verify(options: &Options, errors: &mut Errors) {
    if options.verify.is_some() {
        if let Some(at) = options.transaction {
            errors.add(
                at,
                "`verify` cannot go with `transaction`: a holder that stopped mid-action \
                 cannot have committed its writes without its record, so there is nothing to \
                 ask the provider; leave out `verify`",
            );
        }
        return;
    }
    if let (Some(Takeover::Verify), Some(at)) = (options.takeover, options.takeover_at) {
        errors.add(
            at,
            "`takeover = \"verify\"` asks the provider whether a crashed holder acted, which \
             needs a verification: add `verify = find_refund`, naming \
             `async fn find_refund(key: Key, <each argument of the ask>) -> Verified<T>`",
        );
    }
    if let Some(settle) = &options.settle {
        errors.add(
            settle.span,
            "`settle` is how long the provider's lookups lag behind its writes, which only a \
             verification reads: add `verify = find_refund`, or leave out `settle`",
        );
    }
}

/// `transaction` and the `#[transaction]` argument go together, once each,
/// with a store to open the transaction on.
fn check_transaction(options: &Options, params: &Params, errors: &mut Errors) {
    let mut marked = params.transaction.iter();
    let first = marked.next();
    for extra in marked {
        errors.add(
            extra.marker,
            "`#[transaction]` is given on two arguments: the body runs in one transaction, \
             handed through one argument; keep one",
        );
    }
    let Some(at) = options.transaction else {
        if let Some(first) = first {
            errors.add(
                first.marker,
                "`#[transaction]` marks the argument the guard hands the body's transaction \
                 through, which needs the `transaction` option: write \
                 `#[idempotent(key = \"<run>:credit:<order_id>\", store = &self.db, transaction)]`",
            );
        }
        return;
    };
    if options.store.is_none() {
        errors.add(
            at,
            "`transaction` runs the body in a transaction on the store's own database, and the \
             completion commits in it: name the store with `store = ...`, a `PostgresStore` \
             (`store = &self.db`)",
        );
    }
    if first.is_none() {
        errors.add(
            at,
            "`transaction` hands the body its transaction through an argument marked \
             `#[transaction]`, and none is: add `#[transaction] tx: &Transaction<'_>` \
             (`idempotent_tools::store::postgres::tokio_postgres::Transaction`)",
        );
    }
    if options.record_errors {
        errors.add(
            at,
            "`record_errors` cannot go with `transaction`: an `Err` rolls the body's writes back, \
             and the claim is released so that a retry acts; leave out `record_errors`",
        );
    }
    if options.takeover == Some(Takeover::ReportUnknown) {
        errors.add(
            at,
            "`takeover = \"report_unknown\"` cannot go with `transaction`: a holder whose lease \
             ran out cannot have committed its writes without its record, so a takeover always \
             acts; leave out `takeover`",
        );
    }
}
