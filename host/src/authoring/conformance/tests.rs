use super::*;
use crate::plugin::builtin;

#[test]
fn every_builtin_passes() {
    for b in &builtin::BUILTINS {
        let report = check(&Plugin::Builtin(b), &Config::new()).unwrap();
        assert!(report.passed(), "{}:\n{}", b.name, report.render());
        assert!(!report.cases.is_empty());
    }
}

#[test]
fn identity_is_recognised() {
    let report = check(
        &Plugin::Builtin(builtin::find("identity-policy").unwrap()),
        &Config::new(),
    )
    .unwrap();
    assert!(report.identity);
    let report = check(
        &Plugin::Builtin(builtin::find("default-policy").unwrap()),
        &Config::new(),
    )
    .unwrap();
    assert!(!report.identity);
}
