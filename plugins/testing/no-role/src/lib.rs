//! Test component: a valid component that exports an interface kmirror does not know.
#![cfg(target_family = "wasm")]

kmirror_plugin_sdk::__private::wit_bindgen::generate!({
    inline: "
        package example:greeter@1.0.0;
        interface greet { hello: func(name: string) -> string; }
        world greeter { export greet; }
    ",
    world: "example:greeter/greeter@1.0.0",
    runtime_path: "::kmirror_plugin_sdk::__private::wit_bindgen::rt",
});

struct Greeter;

impl exports::example::greeter::greet::Guest for Greeter {
    fn hello(name: String) -> String {
        format!("hello {name}")
    }
}

export!(Greeter);
