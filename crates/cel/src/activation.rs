//! Activations: the values an evaluation sees, and lazily evaluated composition variables.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cel::common::types::{CelMap, CelMapKey};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, ExecutionError, IdedExpr, Value};

use crate::convert::json_to_val;
use crate::{Env, EvalError, Program};

/// Composition variables (`variables.<name>`), in declaration order. Compile each with an
/// [`Env`] that declares the earlier names (and the same other variables) so a variable can use
/// the ones before it.
#[derive(Debug, Clone, Default)]
pub struct Variables {
    defs: Vec<(String, Program)>,
}

impl Variables {
    pub fn new() -> Self {
        Variables::default()
    }

    /// Adds a variable after the existing ones.
    pub fn push(&mut self, name: impl Into<String>, program: Program) {
        self.defs.push((name.into(), program));
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.defs.iter().map(|(n, _)| n.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }
}

/// One composition variable's state within an activation.
#[derive(Default)]
struct Slot {
    /// Set while evaluating, to refuse a cycle instead of recursing forever.
    running: Mutex<bool>,
    value: OnceLock<Result<Box<dyn Val>, EvalError>>,
}

/// The values one evaluation sees: variables bound to JSON (or CEL) values, and optionally lazy
/// composition variables. Reusable for several programs (the composition variables are then
/// evaluated once for all of them).
#[derive(Default)]
pub struct Activation {
    bindings: HashMap<String, Box<dyn Val>>,
    variables: Option<(Arc<Variables>, Vec<Slot>)>,
    /// The error of a composition variable, reported when the expression fails on it (the
    /// interpreter's resolver interface cannot carry errors).
    variable_error: Mutex<Option<EvalError>>,
}

impl std::fmt::Debug for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation")
            .field("bindings", &self.bindings.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Activation {
    pub fn new() -> Self {
        Activation::default()
    }

    /// Binds `name` to a JSON value (converted once, here).
    pub fn bind(&mut self, name: impl Into<String>, value: &serde_json::Value) -> &mut Self {
        self.bindings.insert(name.into(), json_to_val(value));
        self
    }

    /// Binds `name` to a CEL value (e.g. an optional for `oldSelf` with `optionalOldSelf`, or an
    /// opaque object).
    pub fn bind_value(&mut self, name: impl Into<String>, value: Value) -> &mut Self {
        // Every `Value` but a function has a `Val` form; a function binds as null.
        let val: Box<dyn Val> = Box::<dyn Val>::try_from(value)
            .unwrap_or_else(|_| Box::new(cel::common::types::CelNull));
        self.bindings.insert(name.into(), val);
        self
    }

    /// Binds `name` to an interpreter value object.
    pub fn bind_val(&mut self, name: impl Into<String>, value: Box<dyn Val>) -> &mut Self {
        self.bindings.insert(name.into(), value);
        self
    }

    /// Makes `variables.<name>` evaluate the composition variables, lazily.
    pub fn with_variables(&mut self, variables: Arc<Variables>) -> &mut Self {
        let slots = variables.defs.iter().map(|_| Slot::default()).collect();
        self.variables = Some((variables, slots));
        self
    }

    /// Evaluates `expr` (instrumented) against this activation, in the running cost meter.
    pub(crate) fn evaluate(&self, expr: &IdedExpr, env: &Env) -> Result<Value, EvalError> {
        let mut ctx = Context::with_env(env.cel.clone());
        ctx.set_variable_resolver(self);
        match Value::resolve(expr, &ctx) {
            Ok(v) => Ok(v),
            Err(e) => {
                if let Ok(mut stored) = self.variable_error.lock() {
                    if let Some(err) = stored.take() {
                        if matches!(e, ExecutionError::UndeclaredReference(_)) {
                            return Err(err);
                        }
                    }
                }
                Err(runtime_error(e))
            }
        }
    }

    /// The value of composition variable `index`, evaluating it on first use.
    fn variable(&self, index: usize) -> Result<&dyn Val, EvalError> {
        let Some((vars, slots)) = &self.variables else {
            return Err(EvalError::Runtime("no composition variables".into()));
        };
        let (name, program) = &vars.defs[index];
        let slot = &slots[index];
        if let Some(result) = slot.value.get() {
            return result.as_deref().map_err(Clone::clone);
        }
        {
            let mut running = slot.running.lock().map_err(|_| poisoned())?;
            if *running {
                return Err(EvalError::Variable {
                    name: name.clone(),
                    message: "the variable refers to itself".into(),
                });
            }
            *running = true;
        }
        let computed = self
            .evaluate(&program.expr, &program.env)
            .map_err(|e| match e {
                EvalError::CostLimitExceeded => e,
                other => EvalError::Variable {
                    name: name.clone(),
                    message: other.to_string(),
                },
            })
            .and_then(|v| {
                Box::<dyn Val>::try_from(v).map_err(|e| EvalError::Variable {
                    name: name.clone(),
                    message: e.to_string(),
                })
            });
        if let Ok(mut running) = slot.running.lock() {
            *running = false;
        }
        let result = slot.value.get_or_init(|| computed);
        result.as_deref().map_err(Clone::clone)
    }

    fn record(&self, err: EvalError) {
        if let Ok(mut stored) = self.variable_error.lock() {
            stored.get_or_insert(err);
        }
    }

    /// `variables` as a whole: a map of every composition variable (evaluates all of them).
    fn all_variables(&self) -> Option<Box<dyn Val + '_>> {
        let (vars, _) = self.variables.as_ref()?;
        let mut map = HashMap::new();
        for (i, (name, _)) in vars.defs.iter().enumerate() {
            match self.variable(i) {
                Ok(v) => {
                    map.insert(CelMapKey::from(name.clone()), v.clone_as_boxed());
                }
                Err(e) => {
                    self.record(e);
                    return None;
                }
            }
        }
        Some(Box::new(CelMap::from(map)))
    }
}

fn poisoned() -> EvalError {
    EvalError::Runtime("composition variable state poisoned".into())
}

/// The interpreter's error as ours, worded as cel-go words its runtime errors (Kubernetes shows
/// them to users and matches on their prefixes, e.g. `no such overload`).
pub(crate) fn runtime_error(e: ExecutionError) -> EvalError {
    let text = match &e {
        ExecutionError::FunctionError { function, .. } if function == "cost" => {
            return EvalError::CostLimitExceeded
        }
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::UnsupportedBinaryOperator(..)
        | ExecutionError::ValuesNotComparable(..) => "no such overload".to_owned(),
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_owned(),
        ExecutionError::Overflow(..) => "integer overflow".to_owned(),
        ExecutionError::IndexOutOfBounds(i) => match i {
            Value::Int(i) => format!("index out of bounds: {i}"),
            Value::UInt(i) => format!("index out of bounds: {i}"),
            other => format!("index out of bounds: {other:?}"),
        },
        ExecutionError::UndeclaredReference(name) => {
            format!("no such attribute(s): {name}")
        }
        other => other.to_string(),
    };
    EvalError::Runtime(text)
}

impl VariableResolver for Activation {
    fn resolve<'b>(&'b self, name: &str) -> Option<CowVal<'b, 'b>> {
        if let Some(v) = self.bindings.get(name) {
            return Some(CowVal::Borrowed(v.as_ref()));
        }
        let (vars, _) = self.variables.as_ref()?;
        if name == "variables" {
            return self.all_variables().map(CowVal::Owned);
        }
        let field = name.strip_prefix("variables.")?;
        let index = vars.defs.iter().position(|(n, _)| n == field)?;
        match self.variable(index) {
            Ok(v) => Some(CowVal::Borrowed(v)),
            Err(e) => {
                self.record(e);
                None
            }
        }
    }
}
