//! Tests of the engine: compile checks, evaluation, JSON, macros, variables, cost.

use std::sync::Arc;

use serde_json::json;

use crate::{Activation, CompileError, Env, EvalError, Limits, Program, Value, Variables};

fn env() -> Env {
    Env::new().with_variables(["self", "oldSelf", "object"])
}

fn eval(expr: &str, this: serde_json::Value) -> Result<serde_json::Value, EvalError> {
    let program = Program::compile(expr, &env()).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut act = Activation::new();
    act.bind("self", &this);
    program.eval_json(&act)
}

#[test]
fn evaluates_against_json() {
    let obj =
        json!({"replicas": 3, "maxReplicas": 5, "name": "x", "tags": ["a", "b"], "ratio": 0.5});
    assert_eq!(
        eval("self.replicas <= self.maxReplicas", obj.clone()),
        Ok(json!(true))
    );
    assert_eq!(
        eval("self.replicas > self.maxReplicas", obj.clone()),
        Ok(json!(false))
    );
    assert_eq!(
        eval("self.name + '-' + self.tags[1]", obj.clone()),
        Ok(json!("x-b"))
    );
    assert_eq!(eval("self.ratio * 2.0", obj.clone()), Ok(json!(1.0)));
    assert_eq!(
        eval("{'b': self.replicas, 'a': [1, 'x']}", obj),
        Ok(json!({"a": [1, "x"], "b": 3}))
    );
}

#[test]
fn macros_work() {
    let obj = json!({"items": [1, 2, 3], "m": {"a": 1}});
    for (expr, want) in [
        ("has(self.items)", json!(true)),
        ("has(self.missing)", json!(false)),
        ("has(self.m.a)", json!(true)),
        ("self.items.all(x, x > 0)", json!(true)),
        ("self.items.exists(x, x == 2)", json!(true)),
        ("self.items.exists_one(x, x > 1)", json!(false)),
        ("self.items.map(x, x * 2)", json!([2, 4, 6])),
        ("self.items.map(x, x > 1, x * 10)", json!([20, 30])),
        ("self.items.filter(x, x % 2 == 1)", json!([1, 3])),
        ("self.m.all(k, k == 'a')", json!(true)),
        (
            "[[1, 2], [3]].map(l, l.map(x, x + 1))",
            json!([[2, 3], [4]]),
        ),
    ] {
        assert_eq!(eval(expr, obj.clone()), Ok(want), "{expr}");
    }
}

#[test]
fn errors_inside_exists_are_absorbed_like_cel_go() {
    // `1 / 0` fails for the first element; the second makes `exists` true regardless.
    assert_eq!(
        eval("[0, 1].exists(x, 1 / x == 1)", json!(null)),
        Ok(json!(true))
    );
    assert!(eval("[0].all(x, 1 / x == 1)", json!(null)).is_err());
}

#[test]
fn undeclared_references_do_not_compile() {
    let err = Program::compile("foo == 1", &env()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')"
    );
    assert!(matches!(
        Program::compile("self.x.nope(1)", &env()),
        Err(CompileError::UndeclaredReference { .. })
    ));
    assert!(matches!(
        Program::compile("self.x ==", &env()),
        Err(CompileError::Syntax(_))
    ));
    // comprehension variables, namespaced functions and type names are fine
    Program::compile(
        "self.l.all(x, sets.contains([x], [x]) && type(x) == int)",
        &env(),
    )
    .unwrap();
}

#[test]
fn limits_are_enforced_at_compile_time() {
    let small = env().with_limits(Limits {
        max_expression_length: 10,
        ..Limits::default()
    });
    assert_eq!(
        Program::compile("self.a == self.b", &small).unwrap_err(),
        CompileError::TooLong {
            size: 16,
            limit: 10
        }
    );
    let chain = vec!["1"; 400].join(" + ");
    assert!(matches!(
        Program::compile(&chain, &env()),
        Err(CompileError::TooDeep { .. })
    ));
    let nested = format!("{}1{}", "(".repeat(300), ")".repeat(300));
    assert!(Program::compile(&nested, &env()).is_err());
}

#[test]
fn runtime_cost_is_bounded() {
    let big: Vec<i64> = (0..2000).collect();
    let obj = json!({ "l": big });
    // 2000 * 2000 iterations: cancelled long before finishing.
    assert_eq!(
        eval(
            "self.l.map(x, self.l.map(y, x + y)).size() > 0",
            obj.clone()
        ),
        Err(EvalError::CostLimitExceeded)
    );
    assert_eq!(
        eval("self.l.all(x, self.l.all(y, x + y >= 0))", obj.clone()),
        Err(EvalError::CostLimitExceeded)
    );
    // a single pass is fine
    assert_eq!(eval("self.l.all(x, x >= 0)", obj.clone()), Ok(json!(true)));
    // an absorbed error does not hide an exceeded budget
    assert_eq!(
        eval(
            "true || self.l.map(x, self.l.map(y, y)).size() > 0",
            obj.clone()
        ),
        Ok(json!(true))
    );
    assert_eq!(
        eval("self.l.map(x, self.l.map(y, y)).size() > 0 || true", obj),
        Err(EvalError::CostLimitExceeded)
    );
}

#[test]
fn a_shared_budget_is_spent_across_evaluations() {
    let program = Program::compile("self.l.all(x, x >= 0)", &env()).unwrap();
    let mut act = Activation::new();
    act.bind("self", &json!({"l": (0..100).collect::<Vec<i64>>()}));
    let mut budget = 1000;
    assert!(program.eval_with_budget(&act, &mut budget).is_ok());
    let left = budget;
    assert!(left < 1000 && left > 0);
    let mut tiny = 10;
    assert_eq!(
        program.eval_with_budget(&act, &mut tiny),
        Err(EvalError::CostLimitExceeded)
    );
}

#[test]
fn composition_variables_are_lazy_and_evaluated_once() {
    let base = Env::new().with_variable("object");
    let mut vars = Variables::new();
    vars.push(
        "name",
        Program::compile("object.metadata.name", &base).unwrap(),
    );
    let env2 = base.clone().with_composition_variables(["name"]);
    vars.push(
        "upper",
        Program::compile("variables.name.upperAscii()", &env2).unwrap(),
    );
    vars.push("broken", Program::compile("object.nope", &base).unwrap());
    let env3 = base.with_composition_variables(["name", "upper", "broken"]);
    let mut act = Activation::new();
    act.bind("object", &json!({"metadata": {"name": "web"}}));
    act.with_variables(Arc::new(vars));
    let p = Program::compile("variables.upper + '/' + variables.name", &env3).unwrap();
    assert_eq!(p.eval_json(&act), Ok(json!("WEB/web")));
    // a failing variable reports its own error, not an undeclared reference
    let p = Program::compile("variables.broken == 1", &env3).unwrap();
    let err = p.eval(&act).unwrap_err();
    assert!(
        matches!(err, EvalError::Variable { ref name, .. } if name == "broken"),
        "{err}"
    );
    // an undeclared composition variable does not compile
    assert!(matches!(
        Program::compile("variables.other", &env3),
        Err(CompileError::UndefinedField { .. })
    ));
}

#[test]
fn optional_old_self() {
    let program = Program::compile(
        "oldSelf.hasValue() ? oldSelf.value() == self : true",
        &env(),
    )
    .unwrap();
    let mut act = Activation::new();
    act.bind("self", &json!(1));
    act.bind_value(
        "oldSelf",
        Value::Opaque(Arc::new(cel::objects::OptionalValue::none())),
    );
    assert_eq!(program.eval_json(&act), Ok(json!(true)));
    act.bind_value(
        "oldSelf",
        Value::Opaque(Arc::new(cel::objects::OptionalValue::of(Value::Int(2)))),
    );
    assert_eq!(program.eval_json(&act), Ok(json!(false)));
    let p = Program::compile("self.?a.orValue(5)", &env()).unwrap();
    let mut act = Activation::new();
    act.bind("self", &json!({}));
    assert_eq!(p.eval_json(&act), Ok(json!(5)));
}

#[test]
fn runtime_errors_are_typed() {
    // cel-go's wording, which Kubernetes shows and matches on
    for (expr, text) in [
        ("self.missing == 1", "no such key: missing"),
        ("1 / (self.size() - 0) == 1", "division by zero"),
        ("self.x + 1 == 2", "no such key: x"),
        ("[1][3] == 1", "index out of bounds: 3"),
        ("'a' + 1 == 'a1'", "no such overload"),
        (
            "9223372036854775807 + self.size() + 1 > 0",
            "integer overflow",
        ),
    ] {
        assert_eq!(
            eval(expr, json!({})),
            Err(EvalError::Runtime(text.to_owned())),
            "{expr}"
        );
    }
}

#[test]
fn transition_rules_are_detected() {
    let p = Program::compile("self == oldSelf", &env()).unwrap();
    assert!(p.uses_variable("oldSelf"));
    let p = Program::compile("self.l.all(oldSelf, oldSelf > 0)", &env()).unwrap();
    assert!(!p.uses_variable("oldSelf"));
}

/// Expressions at the nesting limit compile and evaluate on a 2 MiB stack (a tokio worker's),
/// and deeper ones are refused before the parser can recurse into them.
#[test]
fn deep_expressions_are_bounded_and_safe_on_small_stacks() {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            let e = env();
            let mut nested = json!(1);
            for _ in 0..100 {
                nested = json!({ "a": nested });
            }
            let select = format!("self{} == 1", ".a".repeat(100));
            let chain = vec!["1"; 120].join(" + ");
            let parens = format!("{}1{} == 1", "(".repeat(100), ")".repeat(100));
            let lists = format!("{}1{}", "[".repeat(100), "]".repeat(100));
            for src in [&select, &chain, &parens, &lists] {
                let p = Program::compile(src, &e).unwrap_or_else(|err| panic!("{err}"));
                let mut act = Activation::new();
                act.bind("self", &nested);
                p.eval(&act).unwrap();
            }
            for n in [300, 5000, 20000] {
                for src in [
                    vec!["1"; n].join(" + "),
                    format!("{}1{}", "(".repeat(n), ")".repeat(n)),
                    format!("self{}", ".a".repeat(n)),
                    format!("{}1{}", "[".repeat(n), "]".repeat(n)),
                ] {
                    let result = Program::compile(&src, &e);
                    assert!(
                        matches!(result, Err(CompileError::TooDeep { .. })),
                        "{}: {result:?}",
                        &src[..20]
                    );
                }
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn strings_extension() {
    for expr in [
        "'abc'.charAt(1) == 'b'",
        "'abcb'.indexOf('b') == 1 && 'abcb'.lastIndexOf('b') == 3",
        "'TacoCat'.lowerAscii() == 'tacocat' && 'TacoCat'.upperAscii() == 'TACOCAT'",
        "'a-b-c'.replace('-', '+') == 'a+b+c' && 'a-b-c'.replace('-', '+', 1) == 'a+b-c'",
        "'a,b'.split(',') == ['a', 'b']",
        "'tacocat'.substring(4) == 'cat' && 'tacocat'.substring(0, 4) == 'taco'",
        "'  x '.trim() == 'x'",
        "['a', 'b'].join('-') == 'a-b' && ['a', 'b'].join() == 'ab'",
        "'%s is %d'.format(['x', 3]) == 'x is 3'",
        "'abc'.startsWith('a') && 'abc'.endsWith('c') && 'abc'.contains('b')",
        "'abc'.matches('^a.c$')",
        "size('abc') == 3 && size([1]) == 1",
    ] {
        assert_eq!(eval(expr, json!(null)), Ok(json!(true)), "{expr}");
    }
}

#[test]
fn string_growth_is_charged() {
    // Each doubling allocates; the charge grows with the string, so the budget stops it.
    let mut expr = "self.s".to_owned();
    for _ in 0..6 {
        expr = format!("({expr} + {expr})");
    }
    let big = "x".repeat(200_000);
    assert_eq!(
        eval(&format!("size({expr}) > 0"), json!({ "s": big })),
        Err(EvalError::CostLimitExceeded)
    );
}

#[test]
fn growth_functions_are_charged_before_they_run() {
    let big = "x".repeat(100_000);
    // An empty pattern matches between every character: 100k copies of 100 kB, refused unbuilt.
    assert_eq!(
        eval("self.s.replace('', self.s) != ''", json!({ "s": big })),
        Err(EvalError::CostLimitExceeded)
    );
    assert_eq!(
        eval("lists.range(100000000).size() > 0", json!(null)),
        Err(EvalError::CostLimitExceeded)
    );
    let l: Vec<i64> = (0..5000).collect();
    assert_eq!(
        eval("self.l.distinct().size() > 0", json!({ "l": l })),
        Err(EvalError::CostLimitExceeded)
    );
    // Ordinary uses still work, with cel-go's semantics.
    for (expr, want) in [
        ("'a-b-c'.replace('-', '+')", json!("a+b+c")),
        ("'a-b-c'.replace('-', '+', 1)", json!("a+b-c")),
        ("'ab'.replace('', '-')", json!("-a-b-")),
        ("'abc'.replace('b', 'x', 0)", json!("abc")),
        ("lists.range(3)", json!([0, 1, 2])),
        ("[1, 2, 1].distinct()", json!([1, 2])),
    ] {
        assert_eq!(eval(expr, json!(null)), Ok(want), "{expr}");
    }
}
