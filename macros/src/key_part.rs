//! `#[derive(KeyPart)]`: newtypes and fieldless enums.
//!
//! A newtype (a struct with one field) writes its field, so `OrderId(1182)`
//! keys as `1182`. A fieldless enum writes its variant's name, or the name
//! given with `#[key_part(rename = "...")]`. Anything else is refused: a
//! struct of several fields would need a separator between them, which a
//! template states better (`<args.a>:<args.b>`).

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, LitStr, Meta};

use crate::errors::Errors;
use crate::krate::Krate;

/// Writes the impl, or the errors next to nothing (a derive adds items; the
/// type itself stays).
pub fn derive(input: TokenStream) -> TokenStream {
    let krate = Krate::find();
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(err) => return err.to_compile_error(),
    };
    let mut errors = Errors::default();
    let body = match &input.data {
        Data::Struct(data) => {
            reject_key_part_attrs(&input.attrs, "a struct", &mut errors);
            newtype(&input, &data.fields, &krate, &mut errors)
        }
        Data::Enum(data) => {
            reject_key_part_attrs(&input.attrs, "an enum", &mut errors);
            // What each variant writes so far, to refuse two that write one.
            let mut written: Vec<(String, &syn::Ident)> = Vec::new();
            let arms = data.variants.iter().filter_map(|variant| {
                if !matches!(variant.fields, Fields::Unit) {
                    errors.add(
                        variant.fields.span(),
                        format!(
                            "`#[derive(KeyPart)]` writes an enum as its variant's name, so \
                             `{}` cannot carry fields: two values with different fields would \
                             get one key. Key on the fields in the template instead, or \
                             implement `idempotent_tools::KeyPart` by hand",
                            variant.ident
                        ),
                    );
                    return None;
                }
                let name = rename(&variant.attrs, &mut errors).unwrap_or_else(|| {
                    LitStr::new(&variant.ident.to_string(), variant.ident.span())
                });
                let ident = &variant.ident;
                let text = name.value();
                if let Some((_, first)) = written.iter().find(|(t, _)| *t == text) {
                    errors.add(
                        name.span(),
                        format!(
                            "`{first}` and `{ident}` both write `{text}` as a key part, so two \
                             different actions would render one key and the second would replay \
                             the first. Give `{ident}` a name of its own with \
                             `#[key_part(rename = \"...\")]`"
                        ),
                    );
                }
                written.push((text, ident));
                Some(quote!(Self::#ident => out.write_str(#name),))
            });
            let arms: Vec<TokenStream> = arms.collect();
            Some(quote!(match *self { #(#arms)* }))
        }
        Data::Union(data) => {
            errors.add(
                data.union_token.span,
                "`#[derive(KeyPart)]` is for newtypes and fieldless enums; a union has no one \
                 value to key on",
            );
            None
        }
    };
    let Some(body) = body.filter(|_| errors.is_empty()) else {
        return errors.to_compile_errors();
    };

    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // A generic newtype is a key part when its field is. (A bound on a
    // concrete field type would be a trivial bound; the body checks it.)
    let generic = !input.generics.params.is_empty();
    let bound = match &input.data {
        Data::Struct(data) if generic => data.fields.iter().next().map(|field| {
            let ty = &field.ty;
            let krate = krate.at(ty.span());
            quote_spanned!(ty.span()=> #ty: #krate::KeyPart,)
        }),
        _ => None,
    };
    let where_clause = match (where_clause, bound) {
        (Some(w), Some(bound)) => {
            let predicates = &w.predicates;
            quote!(where #predicates, #bound)
        }
        (Some(w), None) => quote!(#w),
        (None, Some(bound)) => quote!(where #bound),
        (None, None) => quote!(),
    };
    let krate = krate.at(Span::call_site());
    quote! {
        impl #impl_generics #krate::KeyPart for #ident #ty_generics #where_clause {
            fn write_key_part(&self, out: &mut #krate::call::KeyPartWriter<'_>) {
                #body
            }
        }
    }
}

/// The body of a newtype's impl: its one field written as a key part.
fn newtype(
    input: &DeriveInput,
    fields: &Fields,
    krate: &Krate,
    errors: &mut Errors,
) -> Option<TokenStream> {
    let mut iter = fields.iter();
    match (iter.next(), iter.next()) {
        (Some(field), None) => {
            for attr in &field.attrs {
                if attr.path().is_ident("key_part") {
                    errors.add(
                        attr.path().span(),
                        "a newtype writes its field as it is; `#[key_part(..)]` goes on enum \
                         variants",
                    );
                }
            }
            let ty = &field.ty;
            let access = match &field.ident {
                Some(name) => quote!(self.#name),
                None => quote!(self.0),
            };
            let krate = krate.at(ty.span());
            let check = quote_spanned!(ty.span()=> <#ty as #krate::KeyPart>::write_key_part);
            Some(quote!(#check(&#access, out)))
        }
        (None, _) => {
            errors.add(
                input.ident.span(),
                format!(
                    "`{}` has no fields, so every value would write the same key part. \
                     `#[derive(KeyPart)]` is for newtypes (one field, such as `struct OrderId(u64)`) \
                     and fieldless enums",
                    input.ident
                ),
            );
            None
        }
        (Some(_), Some(second)) => {
            errors.add(
                second.span(),
                format!(
                    "`{}` has more than one field: `#[derive(KeyPart)]` is for newtypes (one field), \
                     since fields written one after another need a separator to stay apart. Key on \
                     each field in the template, as in `<args.a>:<args.b>`, or implement \
                     `idempotent_tools::KeyPart` by hand",
                    input.ident
                ),
            );
            None
        }
    }
}

fn reject_key_part_attrs(attrs: &[Attribute], what: &str, errors: &mut Errors) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("key_part")) {
        errors.add(
            attr.path().span(),
            format!("`#[key_part(..)]` goes on enum variants, not on {what}"),
        );
    }
}

/// `#[key_part(rename = "...")]` on a variant.
fn rename(attrs: &[Attribute], errors: &mut Errors) -> Option<LitStr> {
    let mut found: Option<LitStr> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("key_part")) {
        if !matches!(attr.meta, Meta::List(_)) {
            errors.add(attr.path().span(), "write `#[key_part(rename = \"...\")]`");
            continue;
        }
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(
                        lit.span(),
                        "an empty name would make an empty key part; give the variant a name",
                    ));
                }
                if found.is_some() {
                    return Err(meta.error("`rename` is given twice; keep one"));
                }
                found = Some(lit);
                Ok(())
            } else {
                Err(meta.error("unknown `key_part` option; the one option is `rename = \"...\"`"))
            }
        });
        if let Err(err) = result {
            errors.push(err);
        }
    }
    found
}
