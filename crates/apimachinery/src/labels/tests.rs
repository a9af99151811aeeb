//! Table-driven tests of label selectors: parsing, printing, matching and `LabelSelector` conversion.

use super::*;
use serde_json::json;

fn labels(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

#[test]
fn parses_to_canonical_string() {
    let cases = [
        ("", ""),
        ("x=a", "x=a"),
        ("x==a", "x==a"),
        ("x!=a", "x!=a"),
        ("x", "x"),
        ("!x", "!x"),
        ("x>1", "x>1"),
        ("  x  in  ( b , a )  ", "x in (a,b)"),
        ("x notin (a)", "x notin (a)"),
        ("x in (a,a,b)", "x in (a,b)"),
        ("x=", "x="),
        ("x=,y", "x=,y"),
        ("x in ()", "x in ()"),
        ("x in (,a)", "x in (,a)"),
        ("x in (a,)", "x in (,a)"),
        ("x in (in,notin)", "x in (in,notin)"),
        ("z=1,a=2", "a=2,z=1"),
        ("x=a,y!=b,z in (h,i,j),!w", "!w,x=a,y!=b,z in (h,i,j)"),
        ("example.com/app=web", "example.com/app=web"),
        ("a.b-c_d=E.f-G_h", "a.b-c_d=E.f-G_h"),
        ("x\t=\na", "x=a"),
    ];
    for (input, want) in cases {
        let sel = parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        assert_eq!(sel.to_string(), want, "input {input:?}");
        // The canonical form parses back to the same selector.
        assert_eq!(parse(want).map(|s| s.to_string()), Ok(want.to_string()));
    }
}

#[test]
fn rejects_bad_syntax_with_upstream_messages() {
    let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let cases: Vec<(&str, String)> = vec![
        ("x,", "found '', expected: identifier after ','".into()),
        (",x", "found ',', expected: !, identifier, or 'end of string'".into()),
        ("x in a", "unable to parse requirement: found 'a' expected: '('".into()),
        ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
        ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'".into()),
        ("x in", "unable to parse requirement: found '' expected: '('".into()),
        ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt".into()),
        ("x=(a)", "unable to parse requirement: found '(', expected: identifier".into()),
        ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
        ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
        ("=a", "found '=', expected: !, identifier, or 'end of string'".into()),
        (
            "x>a",
            "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
        ),
        ("-x=a", format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {name_part}")),
        (
            "x=a$",
            "unable to parse requirement: values[0][x]: Invalid value: \"a$\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into(),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            parse(input).map(|s| s.to_string()),
            Err(want),
            "input {input:?}"
        );
    }
    let long = "a".repeat(64);
    let err = parse(&long).err().unwrap_or_default();
    assert!(
        err.contains("name part must be no more than 63 characters"),
        "{err}"
    );
    let err = parse("a/b/c").err().unwrap_or_default();
    assert!(err.contains("a qualified name must consist of"), "{err}");
    let err = parse("Example.com/a").err().unwrap_or_default();
    assert!(
        err.contains("prefix part a lowercase RFC 1123 subdomain"),
        "{err}"
    );
    let err = parse("/a").err().unwrap_or_default();
    assert!(err.contains("prefix part must be non-empty"), "{err}");
    let err = parse(&format!("x={}", "v".repeat(64)))
        .err()
        .unwrap_or_default();
    assert!(err.contains("must be no more than 63 characters"), "{err}");
}

#[test]
fn matches_labels() {
    let l = labels(json!({"x": "a", "y": "b", "n": "5"}));
    let cases = [
        ("", true),
        ("x=a", true),
        ("x==a", true),
        ("x=b", false),
        ("x!=b", true),
        ("x!=a", false),
        ("z!=b", true),
        ("x in (a,c)", true),
        ("x in (c)", false),
        ("z in (a)", false),
        ("x notin (a)", false),
        ("x notin (c)", true),
        ("z notin (a)", true),
        ("x", true),
        ("z", false),
        ("!z", true),
        ("!x", false),
        ("n>4", true),
        ("n>5", false),
        ("n<6", true),
        ("n<5", false),
        ("x>1", false),
        ("z>1", false),
        ("z<1", false),
        ("x=a,y=b", true),
        ("x=a,y=c", false),
        ("x=a,!z,n>1", true),
    ];
    for (sel, want) in cases {
        let s = parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
        assert_eq!(s.matches(&l), want, "selector {sel:?}");
    }
    assert!(parse("!x").is_ok_and(|s| s.matches(&Map::new())));
    assert!(parse("x").is_ok_and(|s| !s.matches(&Map::new())));
}

#[test]
fn matches_object_metadata_labels() {
    let pod = json!({"metadata": {"name": "p", "labels": {"app": "web"}}});
    let bare = json!({"metadata": {"name": "q"}});
    let sel = parse("app=web").unwrap_or_default();
    assert!(sel.matches_object(&pod));
    assert!(!sel.matches_object(&bare));
    assert!(parse("!app").is_ok_and(|s| s.matches_object(&bare)));
    assert!(Selector::everything().matches_object(&bare));
    assert!(!Selector::nothing().matches_object(&pod));
}

#[test]
fn everything_nothing_and_exact_match() {
    assert!(Selector::everything().is_empty());
    assert!(!Selector::nothing().is_empty());
    assert!(Selector::nothing().is_nothing());
    assert!(!Selector::nothing().matches(&Map::new()));
    assert!(parse("").is_ok_and(|s| s.is_empty()));
    assert!(parse("a").is_ok_and(|s| !s.is_empty()));
    let s = parse("a=1,b in (2),c in (3,4),d!=5").unwrap_or_default();
    assert_eq!(s.requires_exact_match("a"), Some("1"));
    assert_eq!(s.requires_exact_match("b"), Some("2"));
    assert_eq!(s.requires_exact_match("c"), None);
    assert_eq!(s.requires_exact_match("d"), None);
    assert_eq!(s.requires_exact_match("e"), None);
    assert_eq!(s.requirements().len(), 4);
    assert_eq!(s.requirements()[2].operator(), Operator::In);
    assert_eq!(s.requirements()[2].values(), ["3", "4"]);
}

#[test]
fn label_selector_conversion() {
    let ok = [
        (json!({}), ""),
        (json!({"matchLabels": {}, "matchExpressions": []}), ""),
        (json!({"matchLabels": {"b": "2", "a": "1"}}), "a=1,b=2"),
        (
            json!({"matchLabels": {"app": "web"},
                   "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                        {"key": "env", "operator": "NotIn", "values": ["prod"]},
                                        {"key": "x", "operator": "Exists"},
                                        {"key": "y", "operator": "DoesNotExist", "values": []}]}),
            "app=web,env notin (prod),tier in (be,fe),x,!y",
        ),
    ];
    for (v, want) in ok {
        let s = selector_from_label_selector(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(s.to_string(), want);
    }
    let s = selector_from_label_selector(
        &json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]}),
    );
    assert!(s
        .as_ref()
        .is_ok_and(|s| s.matches(&labels(json!({"tier": "fe"})))));
    assert!(s.is_ok_and(|s| !s.matches(&labels(json!({"tier": "be"})))));

    // nil matches nothing, empty matches everything.
    assert!(selector_from_label_selector(&Value::Null).is_ok_and(|s| s.is_nothing()));
    assert!(selector_from_optional_label_selector(None).is_ok_and(|s| !s.matches(&Map::new())));
    assert!(selector_from_label_selector(&json!({})).is_ok_and(|s| s.matches(&Map::new())));

    let bad = [
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]}),
            "\"Foo\" is not a valid label selector operator",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            "values set must be empty for exists and does not exist",
        ),
        (
            json!({"matchLabels": {"app": "a b"}}),
            "values[0][app]: Invalid value: \"a b\": a valid label must be",
        ),
        (
            json!({"matchLabels": {"-app": "a"}}),
            "key: Invalid value: \"-app\": name part must consist",
        ),
    ];
    for (v, want) in bad {
        let err = selector_from_label_selector(&v).err().unwrap_or_default();
        assert!(err.contains(want), "{v}: {err}");
    }
}

#[test]
fn selector_from_set_matches_exactly() {
    let s = selector_from_set(&labels(json!({"b": "2", "a": "1"})));
    assert_eq!(s.to_string(), "a=1,b=2");
    assert!(s.matches(&labels(json!({"a": "1", "b": "2", "c": "3"}))));
    assert!(!s.matches(&labels(json!({"a": "1"}))));
    assert!(selector_from_set(&Map::new()).is_empty());
}

#[test]
fn requirement_validation() {
    assert!(Requirement::new("a", Operator::Equals, vec![]).is_err());
    assert!(Requirement::new("a", Operator::GreaterThan, vec!["1".into(), "2".into()]).is_err());
    let both = Requirement::new("-a", Operator::In, vec![])
        .err()
        .unwrap_or_default();
    assert!(both.starts_with("[key: Invalid value: \"-a\""), "{both}");
    assert!(Requirement::new("a", Operator::LessThan, vec!["10".into()]).is_ok());
}
