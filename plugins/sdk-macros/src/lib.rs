//! `export_plugin!`: turns plain Rust role implementations into a kmirror plugin component.
//!
//! The macro expands, in the plugin crate, to wit-bindgen's `generate!` for a world that
//! exports exactly the roles named, an adapter implementing the generated `Guest` traits by
//! calling the author's types, and wit-bindgen's `export!`. Authors never see wit-bindgen.

use proc_macro::{Group, Span, TokenStream, TokenTree};

/// The WIT package shipped with the SDK (the repository's `wit/` directory).
const WIT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit");
/// The version of the `kmirror:plugin` package the SDK implements.
const WIT_VERSION: &str = "0.1.0";

/// One role the plugin exports.
struct Role {
    /// `topic-filter`, ...
    wit: &'static str,
    /// `topic_filter`, ...
    module: &'static str,
}

const ROLES: [Role; 5] = [
    Role {
        wit: "topic-filter",
        module: "topic_filter",
    },
    Role {
        wit: "group-filter",
        module: "group_filter",
    },
    Role {
        wit: "replication-policy",
        module: "replication_policy",
    },
    Role {
        wit: "config-property-filter",
        module: "config_property_filter",
    },
    Role {
        wit: "record-transform",
        module: "record_transform",
    },
];

/// Exports a kmirror plugin component.
///
/// ```ignore
/// kmirror_plugin_sdk::export_plugin!(topic_filter: MyFilter, group_filter: MyFilter);
/// ```
///
/// Roles: `topic_filter`, `group_filter`, `replication_policy`, `config_property_filter`,
/// `record_transform`.
/// Each type implements `kmirror_plugin_sdk::Configure` and the role's trait.
#[proc_macro]
pub fn export_plugin(input: TokenStream) -> TokenStream {
    match parse(input) {
        Ok(roles) => expand(&roles).parse().unwrap_or_else(|e| {
            error(
                Span::call_site(),
                &format!("kmirror export_plugin!: internal expansion error: {e}"),
            )
        }),
        Err((span, message)) => error(span, &message),
    }
}

fn parse(input: TokenStream) -> Result<Vec<(&'static Role, String)>, (Span, String)> {
    let mut tokens = input.into_iter().peekable();
    let mut roles: Vec<(&'static Role, String)> = Vec::new();
    while let Some(tree) = tokens.next() {
        let TokenTree::Ident(ident) = tree else {
            return Err((
                tree.span(),
                "expected a role name such as `topic_filter`".into(),
            ));
        };
        let name = ident.to_string();
        let role = ROLES.iter().find(|r| r.module == name).ok_or_else(|| {
            let known: Vec<&str> = ROLES.iter().map(|r| r.module).collect();
            (
                ident.span(),
                format!(
                    "unknown role `{name}`; expected one of: {}",
                    known.join(", ")
                ),
            )
        })?;
        if roles.iter().any(|(r, _)| r.module == role.module) {
            return Err((ident.span(), format!("role `{name}` is exported twice")));
        }
        match tokens.next() {
            Some(TokenTree::Punct(p)) if p.as_char() == ':' => {}
            other => {
                let span = other.map_or(ident.span(), |t| t.span());
                return Err((span, format!("expected `: Type` after `{name}`")));
            }
        }
        let mut ty = String::new();
        let mut depth = 0i32;
        while let Some(t) = tokens.peek() {
            if let TokenTree::Punct(p) = t {
                match p.as_char() {
                    ',' if depth == 0 => {
                        tokens.next();
                        break;
                    }
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
            }
            ty.push_str(&tokens.next().map(|t| t.to_string()).unwrap_or_default());
            ty.push(' ');
        }
        if ty.trim().is_empty() {
            return Err((ident.span(), format!("expected a type after `{name}:`")));
        }
        roles.push((role, ty));
    }
    if roles.is_empty() {
        return Err((
            Span::call_site(),
            "name at least one role, e.g. `topic_filter: MyFilter`".into(),
        ));
    }
    Ok(roles)
}

fn expand(roles: &[(&'static Role, String)]) -> String {
    let exports: String = roles
        .iter()
        .map(|(r, _)| format!("export kmirror:plugin/{}@{WIT_VERSION};", r.wit))
        .collect();
    let impls: String = roles
        .iter()
        .map(|(r, ty)| {
            format!(
                "::kmirror_plugin_sdk::__private::macros::{m}!(__KmirrorPluginAdapter, \
                 self::exports::kmirror::plugin::{m}::Guest, {ty});",
                m = r.module
            )
        })
        .collect();
    format!(
        r#"
        // Exports exist only in the WebAssembly build; natively the crate is plain Rust
        // whose logic `cargo test` checks (and a native cdylib links without them).
        #[cfg(target_family = "wasm")]
        #[doc(hidden)]
        #[allow(clippy::all, unused_imports, dead_code)]
        mod __kmirror_plugin_exports {{
            use super::*;
            ::kmirror_plugin_sdk::__private::wit_bindgen::generate!({{
                path: {wit:?},
                inline: "package kmirror:exports; world exports {{ {exports} }}",
                world: "kmirror:exports/exports",
                runtime_path: "::kmirror_plugin_sdk::__private::wit_bindgen::rt",
                generate_all,
            }});
            pub struct __KmirrorPluginAdapter;
            {impls}
            export!(__KmirrorPluginAdapter);
        }}
        "#,
        wit = WIT_DIR,
    )
}

fn error(span: Span, message: &str) -> TokenStream {
    let tokens: TokenStream = format!("::core::compile_error!({message:?});")
        .parse()
        .unwrap_or_default();
    respan(tokens, span)
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut t| {
            if let TokenTree::Group(g) = &t {
                let mut group = Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                t = TokenTree::Group(group);
            } else {
                t.set_span(span);
            }
            t
        })
        .collect()
}
