//! API READY
//!
//! One CEL engine for rkube: CRD `x-kubernetes-validations`, ValidatingAdmissionPolicy,
//! MutatingAdmissionPolicy and webhook `matchConditions` all compile and evaluate through this crate.
//!
//! It builds on the crates.io `cel` crate (parser, macros, interpreter, the cel-go `strings`
//! extension) and adds what Kubernetes' CEL environment (`k8s.io/apiserver/pkg/cel/library`) has on
//! top: lists, sets, regex, URLs, quantities, IPs/CIDRs and `format`, see [`library`].
//!
//! # Use
//! ```
//! use rkube_cel::{Activation, Env, Program};
//! use serde_json::json;
//!
//! let env = Env::new().with_variables(["self", "oldSelf"]);
//! let program = Program::compile("self.replicas <= self.maxReplicas", &env).unwrap();
//! let mut activation = Activation::new();
//! activation.bind("self", &json!({"replicas": 3, "maxReplicas": 5}));
//! assert_eq!(program.eval_json(&activation).unwrap(), json!(true));
//! ```
//!
//! Values: an [`Activation`] binds names to JSON (`serde_json::Value`): objects become CEL maps,
//! arrays lists, integers `int` (larger ones `double`, as upstream's unstructured decoding does),
//! other numbers `double`, `null` null. [`to_json`] turns a result back into JSON. Composition
//! variables (`variables.<name>`, as ValidatingAdmissionPolicy's `spec.variables`) are
//! [`Variables`]: each evaluated at most once per activation, on first use, in the activation's
//! cost budget.
//!
//! # Compile-time checks
//! [`Program::compile`] parses and expands macros, then refuses: expressions longer than
//! [`Limits::max_expression_length`] code points, nesting deeper than [`Limits::max_nesting_depth`],
//! references to variables the [`Env`] does not declare, calls of functions no library defines,
//! `variables.<name>` for names not declared with [`Env::with_composition_variables`], and
//! selections of fields a variable's declared [`Shape`] does not have
//! ([`Env::with_variable_shape`]).
//!
//! # Cost: what is estimated and what differs from upstream
//! Upstream type-checks every expression against the schema, estimates its worst-case cost from
//! `maxLength`/`maxItems` at write time, and refuses expressions over budget; at runtime it counts
//! the actual cost and cancels past `PerCallLimit` (1,000,000).
//!
//! The `cel` crate has no type checker and no cost tracking, so this crate does **not** estimate
//! cost at compile time (no "estimated rule cost exceeds budget" refusals) and does not type-check
//! operand types or result types before evaluation (such mistakes surface as evaluation errors);
//! field names are checked only against a declared [`Shape`].
//! What it does instead is a runtime budget that bounds work and allocation: compiling instruments
//! the expression so that every evaluated call, list/map literal, comprehension iteration and
//! function operand is charged `1 + size` (size: elements of a list or map, bytes/10 of a string),
//! library functions charge for the data they walk, functions whose output can outgrow their
//! inputs are charged before they run (`replace`, `lists.range`, `distinct`), and evaluation
//! aborts with
//! [`EvalError::CostLimitExceeded`] as soon as the charge passes the budget
//! ([`Limits::per_call_cost_limit`], default 1,000,000 as upstream's `PerCallLimit`, or a caller's
//! smaller remaining budget, see [`Program::eval_with_budget`]). Our units are close to upstream's
//! (one per evaluation step, proportional to sizes) but not equal, so an expression near the limit
//! may be accepted by one and cancelled by the other.

mod activation;
mod check;
mod convert;
mod cost;
pub mod library;
mod shape;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

pub use activation::{Activation, Variables};
/// The underlying interpreter crate, for what this API does not wrap (custom functions, values).
pub use cel;
pub use cel::Value;
pub use convert::{
    bytes_value, duration_value, json_to_value, list_value, map_value, optional_value,
    quantity_value, timestamp_value, to_json,
};
pub use shape::Shape;

/// Upstream's runtime per-call cost limit (`celconfig.PerCallLimit`).
pub const PER_CALL_COST_LIMIT: u64 = 1_000_000;

/// Compile-time and runtime limits of an [`Env`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest expression accepted, in Unicode code points (cel-go's
    /// `ExpressionSizeCodePointLimit`, 100,000).
    pub max_expression_length: usize,
    /// Deepest expression tree accepted after macro expansion; bounds the recursion of the
    /// interpreter, so a deep expression cannot overflow a stack.
    pub max_nesting_depth: usize,
    /// The runtime cost budget of one evaluation (upstream `PerCallLimit`).
    pub per_call_cost_limit: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_expression_length: 100_000,
            max_nesting_depth: 250,
            per_call_cost_limit: PER_CALL_COST_LIMIT,
        }
    }
}

/// What an expression may reference: its variables and limits. Build one per kind of expression
/// (CRD rule, policy validation, match condition, ...) and reuse it.
#[derive(Clone)]
pub struct Env {
    variables: BTreeSet<String>,
    /// Declared shapes of variables, for the compile-time field check.
    shapes: BTreeMap<String, Shape>,
    composition: Option<BTreeSet<String>>,
    limits: Limits,
    cel: Arc<cel::Env>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("variables", &self.variables)
            .field("shapes", &self.shapes)
            .field("composition", &self.composition)
            .field("limits", &self.limits)
            .finish()
    }
}

/// The interpreter environment with every library; built once, shared by all [`Env`]s.
static CEL_ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(library::build_env()));

impl Default for Env {
    fn default() -> Self {
        Env::new()
    }
}

impl Env {
    /// An environment with no variables and the default [`Limits`].
    pub fn new() -> Self {
        Env {
            variables: BTreeSet::new(),
            shapes: BTreeMap::new(),
            composition: None,
            limits: Limits::default(),
            cel: CEL_ENV.clone(),
        }
    }

    /// Declares a variable, e.g. `self`, `oldSelf`, `object`, `oldObject`, `request`, `params`,
    /// `namespaceObject`, `authorizer`.
    pub fn with_variable(mut self, name: impl Into<String>) -> Self {
        self.variables.insert(name.into());
        self
    }

    /// Declares a variable whose values have `shape`: selecting a field its objects do not declare
    /// is then a compile error (`undefined field 'x'`), as upstream's type checker reports it.
    pub fn with_variable_shape(mut self, name: impl Into<String>, shape: Shape) -> Self {
        let name = name.into();
        self.variables.insert(name.clone());
        self.shapes.insert(name, shape);
        self
    }

    /// Declares several variables.
    pub fn with_variables<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.variables.extend(names.into_iter().map(Into::into));
        self
    }

    /// Declares the variable `variables` with these composition variable names
    /// (`variables.<name>`); a later call adds names.
    pub fn with_composition_variables<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.variables.insert("variables".to_owned());
        self.composition
            .get_or_insert_with(BTreeSet::new)
            .extend(names.into_iter().map(Into::into));
        self
    }

    /// Replaces the limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether `name` is a declared variable.
    pub fn has_variable(&self, name: &str) -> bool {
        self.variables.contains(name)
    }
}

/// Why an expression did not compile. `Display` gives cel-go's style of message
/// (`ERROR: <input>:1:6: ...`), which Kubernetes puts after `compilation failed: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// Longer than [`Limits::max_expression_length`].
    #[error("expression code point size exceeds limit: size: {size}, limit {limit}")]
    TooLong { size: usize, limit: usize },
    /// Nested deeper than [`Limits::max_nesting_depth`].
    #[error("ERROR: <input>:1:1: expression recursion limit exceeded: {limit}")]
    TooDeep { limit: usize },
    /// A syntax error, or a macro used wrongly.
    #[error("{0}")]
    Syntax(String),
    /// A reference to an undeclared variable or an unknown function.
    #[error("ERROR: <input>:{line}:{column}: undeclared reference to '{name}' (in container '')")]
    UndeclaredReference {
        name: String,
        line: u32,
        column: u32,
    },
    /// `variables.<name>` for a name that is not declared.
    #[error("ERROR: <input>:{line}:{column}: undefined field '{name}'")]
    UndefinedField {
        name: String,
        line: u32,
        column: u32,
    },
}

/// Why an evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The expression failed at runtime (no such key, no matching overload, division by zero, a
    /// library function's error, ...). The text is the interpreter's.
    #[error("{0}")]
    Runtime(String),
    /// The evaluation was cancelled for exceeding its cost budget.
    #[error("operation cancelled: actual cost limit exceeded")]
    CostLimitExceeded,
    /// A composition variable failed; the inner text says why.
    #[error("composited variable \"{name}\" fails to evaluate: {message}")]
    Variable { name: String, message: String },
    /// A result that has no JSON form (a type, a function, ...).
    #[error("the result has no JSON representation: {0}")]
    NotJson(String),
}

/// A compiled expression: parse, macro expansion, static checks and cost instrumentation are
/// done once; [`Program::eval`] is cheap to call many times and from many threads.
#[derive(Debug, Clone)]
pub struct Program {
    expr: Arc<cel::IdedExpr>,
    env: Env,
    source: Arc<str>,
}

impl Program {
    /// Compiles `expr` for `env`.
    pub fn compile(expr: &str, env: &Env) -> Result<Program, CompileError> {
        let size = expr.chars().count();
        if size > env.limits.max_expression_length {
            return Err(CompileError::TooLong {
                size,
                limit: env.limits.max_expression_length,
            });
        }
        let parsed = check::parse(expr, env)?;
        check::check_references(&parsed, env, expr)?;
        let instrumented = cost::instrument(parsed.0, env);
        Ok(Program {
            expr: Arc::new(instrumented),
            env: env.clone(),
            source: expr.into(),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the expression refers to the variable `name` (e.g. `oldSelf`, which makes a CRD
    /// rule a transition rule), not counting comprehension variables of that name.
    pub fn uses_variable(&self, name: &str) -> bool {
        check::uses_variable(&self.expr, name)
    }

    /// Evaluates with the per-call budget of the program's [`Env`].
    pub fn eval(&self, activation: &Activation) -> Result<Value, EvalError> {
        let mut budget = self.env.limits.per_call_cost_limit;
        self.eval_with_budget(activation, &mut budget)
    }

    /// Evaluates with at most `min(per-call limit, *budget)` cost and subtracts the cost spent
    /// from `*budget` (also on failure), so a caller can run many expressions in one total budget
    /// as upstream does for a CRD's rules.
    pub fn eval_with_budget(
        &self,
        activation: &Activation,
        budget: &mut u64,
    ) -> Result<Value, EvalError> {
        let limit = (*budget).min(self.env.limits.per_call_cost_limit);
        let (result, spent) = cost::metered(limit, || activation.evaluate(&self.expr, &self.env));
        *budget = budget.saturating_sub(spent);
        result
    }

    /// [`Program::eval`], converted with [`to_json`].
    pub fn eval_json(&self, activation: &Activation) -> Result<serde_json::Value, EvalError> {
        to_json(&self.eval(activation)?)
    }
}

#[cfg(test)]
mod tests;
