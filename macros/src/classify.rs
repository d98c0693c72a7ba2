//! `#[derive(Classify)]`: an enum error that says, variant by variant,
//! whether the action may have taken effect before it.
//!
//! A variant marked `#[classify(definite)]` or `#[classify(unknown)]` is
//! that. An unmarked variant with exactly one field delegates to its field,
//! which must implement `Classify` (an `std::io::Error`, the guard's own
//! `Error`, another derived error); one with no field or several is refused,
//! at the variant: which of the two it is must be said, never guessed.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, Meta, Type};

use crate::errors::Errors;
use crate::krate::Krate;

/// What a variant's marker says.
#[derive(Clone, Copy)]
enum Marked {
    Definite,
    Unknown,
}

/// Writes the impl, or the errors (a derive adds items; the type stays).
pub fn derive(input: TokenStream) -> TokenStream {
    let krate = Krate::find();
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    let mut errors = Errors::default();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("classify")) {
        errors.add(
            attr.path().span(),
            "`#[classify(..)]` goes on the enum's variants, each saying whether the action may \
             have taken effect",
        );
    }
    let Data::Enum(data) = &input.data else {
        errors.add(
            input.ident.span(),
            format!(
                "`#[derive(Classify)]` is for enums, each variant marked `#[classify(definite)]` \
                 or `#[classify(unknown)]`, or delegating to its one field; implement \
                 `Classify` for `{}` by hand",
                input.ident
            ),
        );
        return errors.to_compile_errors();
    };
    let at = |span: Span| krate.at(span);
    let mut arms = Vec::new();
    let mut delegated: Vec<&Type> = Vec::new();
    for variant in &data.variants {
        let ident = &variant.ident;
        let marked = marker(&variant.attrs, &mut errors);
        let pattern = match &variant.fields {
            Fields::Unit => quote!(Self::#ident),
            Fields::Unnamed(_) => quote!(Self::#ident(..)),
            Fields::Named(_) => quote!(Self::#ident { .. }),
        };
        let failure = |m: Marked| {
            let krate = at(Span::call_site());
            match m {
                Marked::Definite => quote!(#krate::Failure::Definite),
                Marked::Unknown => quote!(#krate::Failure::Unknown),
            }
        };
        if let Some(marked) = marked {
            let failure = failure(marked);
            arms.push(quote!(#pattern => #failure,));
            continue;
        }
        let mut fields = variant.fields.iter();
        match (fields.next(), fields.next()) {
            (Some(field), None) => {
                let ty = &field.ty;
                let krate = at(ty.span());
                let check = quote_spanned!(ty.span()=> <#ty as #krate::Classify>::failure);
                let arm = match &field.ident {
                    Some(name) => quote!(Self::#ident { #name: __field } => #check(__field),),
                    None => quote!(Self::#ident(__field) => #check(__field),),
                };
                arms.push(arm);
                delegated.push(ty);
            }
            (None, _) => errors.add(
                ident.span(),
                format!(
                    "`{ident}` does not say whether the action may have taken effect: mark it \
                     `#[classify(definite)]` (the action did not happen: the claim is released \
                     and a retry acts) or `#[classify(unknown)]` (it may have happened: it is \
                     never acted on again blindly)"
                ),
            ),
            (Some(_), Some(_)) => errors.add(
                ident.span(),
                format!(
                    "`{ident}` has several fields, so it has no one field to delegate to: mark \
                     it `#[classify(definite)]` (the action did not happen) or \
                     `#[classify(unknown)]` (it may have happened)"
                ),
            ),
        }
    }
    if !errors.is_empty() {
        return errors.to_compile_errors();
    }

    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // A generic enum classifies when the fields it delegates to do. (A
    // bound on a concrete field type would be trivial; the arm checks it.)
    let mut predicates: Vec<TokenStream> = where_clause
        .map(|w| w.predicates.iter().map(|p| quote!(#p)).collect())
        .unwrap_or_default();
    if !input.generics.params.is_empty() {
        predicates.extend(delegated.iter().map(|ty| {
            let krate = at(ty.span());
            quote_spanned!(ty.span()=> #ty: #krate::Classify)
        }));
    }
    let where_clause = if predicates.is_empty() {
        quote!()
    } else {
        quote!(where #(#predicates),*)
    };
    let krate = at(Span::call_site());
    let body = if arms.is_empty() {
        quote!(match *self {})
    } else {
        quote!(match self { #(#arms)* })
    };
    quote! {
        impl #impl_generics #krate::Classify for #ident #ty_generics #where_clause {
            fn failure(&self) -> #krate::Failure {
                #body
            }
        }
    }
}

/// `#[classify(definite)]` or `#[classify(unknown)]` on a variant.
fn marker(attrs: &[Attribute], errors: &mut Errors) -> Option<Marked> {
    let mut found: Option<Marked> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("classify")) {
        if !matches!(attr.meta, Meta::List(_)) {
            errors.add(
                attr.path().span(),
                "write `#[classify(definite)]` or `#[classify(unknown)]`",
            );
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            let marked = if meta.path.is_ident("definite") {
                Marked::Definite
            } else if meta.path.is_ident("unknown") {
                Marked::Unknown
            } else {
                return Err(meta.error(
                    "a variant is `#[classify(definite)]` (the action did not happen) or \
                     `#[classify(unknown)]` (it may have happened)",
                ));
            };
            if found.is_some() {
                return Err(meta.error("the variant is classified twice; keep one"));
            }
            found = Some(marked);
            Ok(())
        });
        if let Err(err) = result {
            errors.push(err);
        }
    }
    found
}
