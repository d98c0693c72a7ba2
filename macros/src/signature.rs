//! Which functions the guard can serve: an `async fn` that returns
//! `Result<O, E>`, `O` a `ToolOutput` such as `Outcome<T>`.

use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{GenericArgument, PathArguments, ReturnType, Signature, Type};

use crate::errors::Errors;
use crate::params::type_name;

/// Checks that the guard can serve this function, and returns its declared
/// return type.
pub fn check<'a>(sig: &'a Signature, errors: &mut Errors) -> Option<&'a Type> {
    let name = &sig.ident;
    let ret = match &sig.output {
        ReturnType::Type(_, ty) => Some(&**ty),
        ReturnType::Default => None,
    };

    if sig.asyncness.is_none() {
        let boxed = ret.is_some_and(is_future);
        let message = if boxed {
            format!(
                "`{name}` is not an `async fn` but returns a future: another attribute has \
                 already rewritten it, such as rmcp's `#[tool]` or `#[async_trait]` on its impl. \
                 Place `#[idempotent]` above `#[tool]`, so that it reads the `async fn` as \
                 written; with `#[async_trait]`, declare the method a native `async fn` instead"
            )
        } else {
            format!(
                "`#[idempotent]` needs an `async fn`: before the body runs, the guard awaits the \
                 store, and waits for an identical call that is already in flight. Write \
                 `async fn {name}(..)`"
            )
        };
        errors.add(sig.fn_token.span, message);
        return None;
    }

    let needed = "the guard tells a fresh result from a replay or a conflict through \
                  `Outcome`, releases the claim when the body returns `Err`, and reports a store \
                  failure or a missing run through `E`, which needs `From<idempotent_tools::Error>`";
    let Some(ret) = ret else {
        errors.add(
            name.span(),
            format!(
                "`{name}` returns nothing, but it must return `Result<Outcome<T>, E>`: {needed}. \
                 Write `-> Result<Outcome<Refund>, PayError>`, and let the body return \
                 `Ok(refund)`"
            ),
        );
        return None;
    };
    let Type::Path(_) = peel(ret) else {
        errors.add(
            ret.span(),
            format!(
                "`{name}` must return `Result<Outcome<T>, E>`: {needed}. Write \
                 `-> Result<Outcome<Refund>, PayError>`, and let the body return `Ok(refund)`"
            ),
        );
        return None;
    };
    match type_name(ret).as_deref() {
        Some(last @ ("Outcome" | "Option")) => {
            errors.add(
                ret.span(),
                format!(
                    "`{name}` returns `{last}<..>` with no error type, but it must return \
                     `Result<Outcome<T>, E>`: {needed}. Write \
                     `-> Result<Outcome<Refund>, PayError>`, and let the body return `Ok(refund)`"
                ),
            );
            None
        }
        Some("Result") => match success_type(ret) {
            Some(value) if is_plain_value(value) => {
                let value = value.to_token_stream().to_string().replace(' ', "");
                errors.add(
                    success_type(ret).map_or(ret.span(), Spanned::span),
                    format!(
                        "`{name}` returns `{value}` on success, but a guarded tool returns \
                         `Outcome<{value}>`, which tells the caller a fresh result from a replay \
                         or a conflict. Write `Result<Outcome<{value}>, ..>`; the body still \
                         returns `Ok(value)`, and the guard wraps it"
                    ),
                );
                None
            }
            _ => Some(ret),
        },
        _ => Some(ret),
    }
}

/// The `O` of a return type written `Result<O, ..>`.
fn success_type(ret: &Type) -> Option<&Type> {
    let Type::Path(path) = peel(ret) else {
        return None;
    };
    let PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    }
}

/// The `E` of a return type written `Result<O, E>`; `None` for an alias
/// that names one argument.
pub fn error_type(ret: &Type) -> Option<&Type> {
    let Type::Path(path) = peel(ret) else {
        return None;
    };
    let PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
        return None;
    };
    match args.args.iter().nth(1)? {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    }
}

/// A type that is plainly a value and no `ToolOutput`: a number, text, a
/// collection, a tuple, a reference.
fn is_plain_value(ty: &Type) -> bool {
    match peel(ty) {
        Type::Tuple(_) | Type::Reference(_) | Type::Array(_) | Type::Slice(_) => true,
        Type::Path(_) => matches!(
            type_name(ty).as_deref(),
            Some(
                "u8" | "u16"
                    | "u32"
                    | "u64"
                    | "u128"
                    | "usize"
                    | "i8"
                    | "i16"
                    | "i32"
                    | "i64"
                    | "i128"
                    | "isize"
                    | "f32"
                    | "f64"
                    | "bool"
                    | "char"
                    | "str"
                    | "String"
                    | "Vec"
                    | "HashMap"
                    | "BTreeMap"
                    | "Value"
            )
        ),
        _ => false,
    }
}

/// The return type a refused function's body can still be checked against,
/// and whether the function is async: a path type that is not plainly
/// something else (an `Outcome` alone, an `Option`, a future).
pub fn body_type(sig: &Signature) -> Option<(&Type, bool)> {
    let ReturnType::Type(_, ret) = &sig.output else {
        return None;
    };
    let named = type_name(ret)?;
    let other = matches!(named.as_str(), "Outcome" | "Option")
        || is_future(ret)
        || success_type(ret).is_some_and(is_plain_value);
    (!other && matches!(peel(ret), Type::Path(_))).then_some((&**ret, sig.asyncness.is_some()))
}

/// `impl Future`, `Pin<Box<dyn Future>>`, `BoxFuture`: what a macro that
/// has already made the future returns.
fn is_future(ty: &Type) -> bool {
    match ty {
        Type::ImplTrait(_) => true,
        Type::Path(p) => p.path.segments.last().is_some_and(|last| {
            let name = last.ident.to_string();
            name.ends_with("Future")
                || (name == "Pin"
                    && last
                        .arguments
                        .to_token_stream()
                        .to_string()
                        .contains("Future"))
        }),
        _ => false,
    }
}

/// A type without the parentheses or invisible groups around it.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(p) => peel(&p.elem),
        Type::Group(g) => peel(&g.elem),
        _ => ty,
    }
}
