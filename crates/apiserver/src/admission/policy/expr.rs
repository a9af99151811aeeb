//! Policy expressions on the `rkube-cel` engine (upstream `admission/plugin/cel`: the composited
//! compiler, `filter.go`): the environment a policy's expressions compile in (`object`,
//! `oldObject`, `request`, `namespaceObject`, `params` when the policy has a `paramKind`,
//! `variables.<name>` for the variables declared before), one [`Input`] per evaluation with a
//! shared cost budget, and upstream's error texts (`compilation error: ...`,
//! `expression '...' resulted in error: ...`).
//!
//! Not available: `authorizer` (the engine has no authorization library), so expressions that
//! use it do not compile (`undeclared reference to 'authorizer'`).

use std::cell::Cell;
use std::sync::Arc;

use rkube_cel::{Activation, Env, Program, Value as CelValue};
use serde_json::Value;

/// Upstream `RuntimeCELCostBudget`: what all expressions of one evaluation (one policy, binding
/// and param) may spend together.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// Which optional names the expressions of a policy may use.
#[derive(Clone, Copy, Debug)]
pub struct Decls {
    pub params: bool,
    /// MutatingAdmissionPolicy expressions: `Object{...}`, `JSONPatch{...}` and
    /// `jsonpatch.escapeKey` are lowered first (see [`super::lower`]).
    pub mutation: bool,
}

fn env(decls: Decls, variables: &[String]) -> Env {
    let mut names = vec!["object", "oldObject", "request", "namespaceObject"];
    if decls.params {
        names.push("params");
    }
    let env = Env::new().with_variables(names);
    if variables.is_empty() {
        env
    } else {
        env.with_composition_variables(variables.iter().cloned())
    }
}

/// A policy's `spec.variables`, compiled in order (each may use the ones before it).
#[derive(Default)]
pub struct Variables {
    compiled: Arc<rkube_cel::Variables>,
    /// Names that compiled, in order.
    names: Vec<String>,
    /// Names that did not, with the error an expression using them reports.
    failed: Vec<(String, String)>,
}

impl Variables {
    pub fn compile(list: Vec<(String, String)>, decls: Decls) -> Variables {
        let mut compiled = rkube_cel::Variables::new();
        let mut names: Vec<String> = Vec::new();
        let mut failed: Vec<(String, String)> = Vec::new();
        for (name, text) in list {
            let lowered = lower(&text, decls);
            let error = match failed_reference(&lowered, &failed) {
                Some(e) => Some(e),
                None => match Program::compile(&lowered, &env(decls, &names)) {
                    Ok(p) => {
                        compiled.push(name.clone(), p);
                        names.push(name.clone());
                        None
                    }
                    Err(e) => Some(format!("compilation error: {e}")),
                },
            };
            if let Some(e) = error {
                failed.push((name, e));
            }
        }
        Variables {
            compiled: Arc::new(compiled),
            names,
            failed,
        }
    }
}

/// The error of an expression that uses a variable that did not compile (upstream evaluates such
/// a variable to its compilation error).
fn failed_reference(text: &str, failed: &[(String, String)]) -> Option<String> {
    failed.iter().find_map(|(name, err)| {
        let needle = format!("variables.{name}");
        let used = text.match_indices(&needle).any(|(at, _)| {
            !text[at + needle.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        used.then(|| format!("composited variable \"{name}\" fails to evaluate: {err}"))
    })
}

fn lower(text: &str, decls: Decls) -> String {
    if decls.mutation {
        super::lower::lower(text).text
    } else {
        text.to_string()
    }
}

/// Which of the request's values a policy's expressions name, so that the others are neither
/// built nor converted for evaluation. Found by a text search over every expression of the
/// policy (a name inside a string literal only costs an unneeded binding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Uses {
    pub object: bool,
    pub old_object: bool,
    pub request: bool,
    pub params: bool,
    pub namespace_object: bool,
}

impl Uses {
    /// The names used by the expressions (`expression`, `messageExpression`,
    /// `valueExpression` fields) anywhere under `spec`.
    pub fn of_spec(spec: &Value) -> Uses {
        let mut uses = Uses::default();
        uses.scan(spec);
        uses
    }

    fn scan(&mut self, v: &Value) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        (
                            "expression" | "messageExpression" | "valueExpression",
                            Value::String(t),
                        ) => {
                            self.object |= t.contains("object");
                            self.old_object |= t.contains("oldObject");
                            self.request |= t.contains("request");
                            self.params |= t.contains("params");
                            self.namespace_object |= t.contains("namespaceObject");
                        }
                        _ => self.scan(v),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| self.scan(v)),
            _ => {}
        }
    }
}

/// One compiled expression; a compilation error is kept and reported when it is evaluated, as
/// upstream does.
pub struct Expr {
    text: String,
    compiled: Result<Program, String>,
    /// Object literal type mismatches (mutations), reported after evaluation as upstream.
    type_errors: Vec<String>,
}

/// Why an evaluation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// Upstream's text: `compilation error: ...` or `expression '...' resulted in error: ...`.
    Failed(String),
    /// The evaluation's shared budget ran out: upstream stops evaluating the policy.
    OutOfBudget,
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::Failed(m) => f.write_str(m),
            EvalError::OutOfBudget => f.write_str(
                "validation failed due to running out of cost budget, no further validation rules will be run",
            ),
        }
    }
}

impl Expr {
    pub fn compile(text: &str, decls: Decls, variables: &Variables) -> Expr {
        let (lowered, type_errors) = if decls.mutation {
            let l = super::lower::lower(text);
            (l.text, l.type_errors)
        } else {
            (text.to_string(), Vec::new())
        };
        let compiled = match failed_reference(&lowered, &variables.failed) {
            Some(e) => Err(format!("expression '{text}' resulted in error: {e}")),
            None => Program::compile(&lowered, &env(decls, &variables.names))
                .map_err(|e| format!("compilation error: {e}")),
        };
        Expr {
            text: text.to_string(),
            compiled,
            type_errors,
        }
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The lowered literals' type-name mismatches (upstream's `type mismatch` check).
    pub fn type_errors(&self) -> &[String] {
        &self.type_errors
    }

    pub fn eval(&self, input: &Input<'_>) -> Result<Out, EvalError> {
        let program = self
            .compiled
            .as_ref()
            .map_err(|e| EvalError::Failed(e.clone()))?;
        let mut budget = input.budget.get();
        let result = program.eval_with_budget(&input.activation, &mut budget);
        input.budget.set(budget);
        match result {
            Ok(v) => Ok(Out(v)),
            Err(rkube_cel::EvalError::CostLimitExceeded) if budget == 0 => {
                Err(EvalError::OutOfBudget)
            }
            Err(e) => Err(EvalError::Failed(format!(
                "expression '{}' resulted in error: {e}",
                self.text
            ))),
        }
    }
}

/// A result.
#[derive(Debug)]
pub struct Out(CelValue);

impl Out {
    pub fn as_bool(&self) -> Option<bool> {
        match self.0 {
            CelValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            CelValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.0, CelValue::Null)
    }

    /// The value as JSON (maps, lists, scalars).
    pub fn to_json(&self) -> Result<Value, String> {
        rkube_cel::to_json(&self.0).map_err(|e| e.to_string())
    }

    /// cel-go's name of the result's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match &self.0 {
            CelValue::List(_) => "list",
            CelValue::Map(_) => "map",
            CelValue::Function(..) => "function",
            CelValue::Int(_) => "int",
            CelValue::UInt(_) => "uint",
            CelValue::Float(_) => "double",
            CelValue::String(_) => "string",
            CelValue::Bytes(_) => "bytes",
            CelValue::Bool(_) => "bool",
            CelValue::Duration(_) => "google.protobuf.Duration",
            CelValue::Timestamp(_) => "google.protobuf.Timestamp",
            CelValue::Null => "null_type",
            _ => "object",
        }
    }
}

/// The values one evaluation sees, and its cost budget.
pub struct Input<'a> {
    activation: Activation,
    uses: Uses,
    budget: Cell<u64>,
    _inputs: std::marker::PhantomData<&'a ()>,
}

impl<'a> Input<'a> {
    /// Binds the request's values (converted once here; reuse the input for every expression of
    /// one evaluation).
    pub fn new(
        object: &Value,
        old_object: &Value,
        request: &Value,
        params: &Value,
        namespace_object: &Value,
        variables: &'a Variables,
    ) -> Input<'a> {
        let all = Uses {
            object: true,
            old_object: true,
            request: true,
            params: true,
            namespace_object: true,
        };
        Input::with_uses(
            all,
            object,
            old_object,
            request,
            params,
            namespace_object,
            variables,
        )
    }

    /// [`Input::new`] binding only the values `uses` names (the others are never evaluated).
    pub fn with_uses(
        uses: Uses,
        object: &Value,
        old_object: &Value,
        request: &Value,
        params: &Value,
        namespace_object: &Value,
        variables: &'a Variables,
    ) -> Input<'a> {
        let mut activation = Activation::new();
        for (used, name, value) in [
            (uses.object, "object", object),
            (uses.old_object, "oldObject", old_object),
            (uses.request, "request", request),
            (uses.params, "params", params),
            (uses.namespace_object, "namespaceObject", namespace_object),
        ] {
            if used {
                activation.bind(name, value);
            }
        }
        if !variables.names.is_empty() {
            activation.with_variables(variables.compiled.clone());
        }
        Input {
            activation,
            uses,
            budget: Cell::new(RUNTIME_COST_BUDGET),
            _inputs: std::marker::PhantomData,
        }
    }

    /// A fresh budget and fresh variables for the next evaluation with other params.
    pub fn rebind_params(&mut self, params: &Value, variables: &'a Variables) {
        if self.uses.params {
            self.activation.bind("params", params);
        }
        if !variables.names.is_empty() {
            self.activation.with_variables(variables.compiled.clone());
        }
        self.budget.set(RUNTIME_COST_BUDGET);
    }

    /// The object changed (a mutation): rebinds it; variables are evaluated again.
    pub fn rebind_object(&mut self, object: &Value, variables: &'a Variables) {
        if self.uses.object {
            self.activation.bind("object", object);
        }
        if !variables.names.is_empty() {
            self.activation.with_variables(variables.compiled.clone());
        }
    }

    /// Another cost budget for the expressions that follow (upstream gives match conditions and
    /// each mutation their own).
    pub fn reset_budget(&self) {
        self.budget.set(RUNTIME_COST_BUDGET);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D: Decls = Decls {
        params: true,
        mutation: false,
    };

    fn input<'a>(vars: &'a Variables, object: Value, params: Value) -> Input<'a> {
        Input::new(
            &object,
            &Value::Null,
            &json!({"operation": "CREATE"}),
            &params,
            &Value::Null,
            vars,
        )
    }

    #[test]
    fn expressions_see_the_request_values() {
        let vars = Variables::default();
        let e = Expr::compile(
            "object.spec.replicas <= int(params.data.maxReplicas)",
            D,
            &vars,
        );
        let i = input(
            &vars,
            json!({"spec": {"replicas": 3}}),
            json!({"data": {"maxReplicas": "5"}}),
        );
        assert_eq!(e.eval(&i).unwrap().as_bool(), Some(true));
        let e = Expr::compile("request.operation", D, &vars);
        assert_eq!(e.eval(&i).unwrap().as_str(), Some("CREATE"));
    }

    #[test]
    fn errors_read_as_upstreams() {
        let vars = Variables::default();
        let e = Expr::compile("object.spec.", D, &vars);
        let i = input(&vars, json!({}), Value::Null);
        let EvalError::Failed(m) = e.eval(&i).unwrap_err() else {
            panic!()
        };
        assert!(m.starts_with("compilation error: "), "{m}");
        let e = Expr::compile("object.spec.replicas > 1", D, &vars);
        let EvalError::Failed(m) = e.eval(&i).unwrap_err() else {
            panic!()
        };
        assert!(
            m.starts_with("expression 'object.spec.replicas > 1' resulted in error: "),
            "{m}"
        );
        let no_params = Decls { params: false, ..D };
        let e = Expr::compile("params.x == 1", no_params, &vars);
        let EvalError::Failed(m) = e.eval(&i).unwrap_err() else {
            panic!()
        };
        assert!(m.contains("undeclared reference to 'params'"), "{m}");
    }

    #[test]
    fn variables_compose_in_order() {
        let vars = Variables::compile(
            vec![
                ("replicas".into(), "object.spec.replicas".into()),
                ("double".into(), "variables.replicas * 2".into()),
                ("broken".into(), "object.".into()),
            ],
            D,
        );
        let e = Expr::compile("variables.double == 6", D, &vars);
        let i = input(&vars, json!({"spec": {"replicas": 3}}), Value::Null);
        assert_eq!(e.eval(&i).unwrap().as_bool(), Some(true));
        let e = Expr::compile("variables.broken == 1", D, &vars);
        let EvalError::Failed(m) = e.eval(&i).unwrap_err() else {
            panic!()
        };
        assert!(
            m.contains("composited variable \"broken\" fails to evaluate: compilation error: "),
            "{m}"
        );
    }

    #[test]
    fn mutation_literals_evaluate_to_json() {
        let d = Decls {
            mutation: true,
            ..D
        };
        let vars = Variables::default();
        let e = Expr::compile(
            "Object{metadata: Object.metadata{labels: {'team': object.metadata.name}}}",
            d,
            &vars,
        );
        let i = input(&vars, json!({"metadata": {"name": "a"}}), Value::Null);
        assert_eq!(
            e.eval(&i).unwrap().to_json().unwrap(),
            json!({"metadata": {"labels": {"team": "a"}}})
        );
        let e = Expr::compile(
            "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: 'x'}]",
            d,
            &vars,
        );
        assert_eq!(
            e.eval(&i).unwrap().to_json().unwrap(),
            json!([{"op": "add", "path": "/metadata/labels/a~1b", "value": "x"}])
        );
    }
}
