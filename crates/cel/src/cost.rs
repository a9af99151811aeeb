//! The runtime cost budget.
//!
//! The interpreter has no hook per evaluation step, so compiling rewrites the expression: every
//! call, list/map literal and comprehension step is wrapped in the internal function `@cost(x)`,
//! which charges `1 + size(x)` to the budget of the running evaluation and passes `x` through;
//! operands of calls are wrapped too, so an operation on a large value (`==`, `in`, `+`,
//! `contains`, a library function) costs in proportion to its input. Names starting with `@`
//! cannot be written in CEL source, so user code cannot call `@cost`.
//!
//! The budget lives in a thread-local: an evaluation is synchronous, and the functions the
//! interpreter calls are plain `fn` pointers with no context argument. Nested evaluations on the
//! same thread (lazy composition variables) share the outer budget.
//!
//! The rewrite keeps the shapes the interpreter recognises: the `@result && p` / `@result || p`
//! step of `all`/`exists` (whose error absorption depends on it) and the `@result + [e]` step of
//! `map`/`filter` (appended in place); only their inner expressions are wrapped.

use std::cell::Cell;

use cel::common::ast::{operators, CallExpr, EntryExpr, Expr};
use cel::common::types::{CelBytes, CelString, Kind};
use cel::common::value::{CowVal, Val};
use cel::{ExecutionError, IdedExpr};

use crate::{Env, EvalError};

/// The internal function every instrumented node goes through.
pub(crate) const COST_FN: &str = "@cost";
const EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";

#[derive(Clone, Copy, Default)]
struct Meter {
    active: bool,
    used: u64,
    limit: u64,
}

thread_local! {
    static METER: Cell<Meter> = const { Cell::new(Meter { active: false, used: 0, limit: 0 }) };
}

/// Resets the meter when the outermost evaluation ends, even by unwinding.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        METER.with(|m| m.set(Meter::default()));
    }
}

/// Runs `eval` with a budget of `limit`; returns its result (turned into
/// [`EvalError::CostLimitExceeded`] if the budget ran out, even if the expression absorbed the
/// error) and the cost spent. Nested calls run in the outer budget.
pub(crate) fn metered<T>(
    limit: u64,
    eval: impl FnOnce() -> Result<T, EvalError>,
) -> (Result<T, EvalError>, u64) {
    let outer = METER.with(Cell::get);
    if outer.active {
        let result = eval();
        let now = METER.with(Cell::get);
        let spent = now.used.saturating_sub(outer.used);
        return (finish(result, now), spent);
    }
    METER.with(|m| {
        m.set(Meter {
            active: true,
            used: 0,
            limit,
        })
    });
    let _reset = Reset;
    let result = eval();
    let now = METER.with(Cell::get);
    (finish(result, now), now.used)
}

fn finish<T>(result: Result<T, EvalError>, meter: Meter) -> Result<T, EvalError> {
    if meter.used > meter.limit {
        Err(EvalError::CostLimitExceeded)
    } else {
        result
    }
}

/// Charges `n` to the running evaluation; fails once the budget is exhausted. Outside an
/// evaluation (a library function called directly) nothing is charged.
pub(crate) fn charge(n: u64) -> Result<(), ExecutionError> {
    METER.with(|m| {
        let mut meter = m.get();
        if !meter.active {
            return Ok(());
        }
        meter.used = meter.used.saturating_add(n);
        m.set(meter);
        if meter.used > meter.limit {
            Err(ExecutionError::function_error("cost", EXCEEDED))
        } else {
            Ok(())
        }
    })
}

/// The size a value is charged for: elements of a list or map, a tenth of a string's or bytes'
/// length (upstream's string cost factor), else nothing.
pub(crate) fn size_of(value: &dyn Val) -> u64 {
    match value.get_type().kind() {
        Kind::String => value
            .downcast_ref::<CelString>()
            .map_or(0, |s| s.inner().len() as u64 / 10),
        Kind::Bytes => value
            .downcast_ref::<CelBytes>()
            .map_or(0, |b| b.inner().len() as u64 / 10),
        Kind::List | Kind::Map => value
            .as_sizer()
            .map_or(0, |s| u64::try_from(*s.size().inner()).unwrap_or(0)),
        _ => 0,
    }
}

/// `@cost(x)`: charges for `x`, returns it.
pub(crate) fn cost_fn<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args
        .pop()
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
    charge(1 + size_of(value.as_ref()))?;
    Ok(value)
}

/// Calls whose operands are not charged: they pass values through or take O(1) on them.
const UNCHARGED_OPERANDS: &[&str] = &[
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::CONDITIONAL,
    operators::LOGICAL_NOT,
    operators::NOT_STRICTLY_FALSE,
    operators::INDEX,
    operators::OPT_INDEX,
    operators::OPT_SELECT,
    operators::NEGATE,
    "size",
    "type",
    "dyn",
    "has",
];

/// The instrumented form of `expr` for `env`.
pub(crate) fn instrument(mut expr: IdedExpr, env: &Env) -> IdedExpr {
    let mut scopes = Vec::new();
    Instrumenter {
        env,
        scopes: &mut scopes,
    }
    .expr(&mut expr);
    expr
}

struct Instrumenter<'a> {
    env: &'a Env,
    /// Comprehension variables in scope.
    scopes: &'a mut Vec<String>,
}

fn wrap(expr: &mut IdedExpr) {
    let inner = std::mem::take(expr);
    *expr = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: COST_FN.to_owned(),
            target: None,
            args: vec![inner],
        }),
    };
}

/// A call to the internal function `name` with `args`.
fn internal_call(name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    IdedExpr {
        id: 0,
        expr: Expr::Call(CallExpr {
            func_name: name.to_owned(),
            target: None,
            args,
        }),
    }
}

/// Functions whose output (or work) can grow far beyond their inputs are charged before they
/// run, not after: `s.replace(old, new)` (an empty `old` matches between every character) runs as
/// the internal `@replace`, which charges for its result before building it; `lists.range(n)`
/// charges `n`, and `l.distinct()` the square of its size, before the call.
fn guard(call: &mut CallExpr) {
    let namespace = |c: &CallExpr, ns: &str| matches!(c.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(n), .. }) if n == ns);
    match call.func_name.as_str() {
        "replace" if matches!(call.args.len(), 2 | 3) => {
            if let Some(target) = call.target.take() {
                call.args.insert(0, *target);
                call.func_name = REPLACE_FN.to_owned();
            }
        }
        "range" if namespace(call, "lists") && call.args.len() == 1 => {
            let n = std::mem::take(&mut call.args[0]);
            call.args[0] = internal_call(COST_VALUE_FN, vec![n]);
        }
        "distinct" if call.args.is_empty() => {
            if let Some(target) = call.target.as_deref_mut() {
                let list = std::mem::take(target);
                *target = internal_call(COST_SQUARE_FN, vec![list]);
            }
        }
        _ => {}
    }
}

/// `@replace(s, old, new[, n])`: the strings extension's `replace`, charged before it allocates.
pub(crate) const REPLACE_FN: &str = "@replace";
/// `@cost_value(n)`: charges an int's value, returns it.
pub(crate) const COST_VALUE_FN: &str = "@cost_value";
/// `@cost_square(l)`: charges the square of a list's size, returns it.
pub(crate) const COST_SQUARE_FN: &str = "@cost_square";

/// `@cost_value(n)`.
pub(crate) fn cost_value_fn<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args
        .pop()
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
    if let Some(n) = value.downcast_ref::<cel::common::types::CelInt>() {
        charge(u64::try_from(*n.inner()).unwrap_or(0))?;
    }
    Ok(value)
}

/// `@cost_square(l)`.
pub(crate) fn cost_square_fn<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args
        .pop()
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
    let n = size_of(value.as_ref());
    charge(n.saturating_mul(n))?;
    Ok(value)
}

/// `@replace(s, old, new[, n])`, as cel-go's `replace` (an empty `old` matches at every
/// character boundary; a negative `n` replaces all).
pub(crate) fn replace(args: &[cel::Value]) -> Result<cel::Value, ExecutionError> {
    use cel::Value;
    let (Some(Value::String(s)), Some(Value::String(old)), Some(Value::String(new))) =
        (args.first(), args.get(1), args.get(2))
    else {
        return Err(crate::library::no_overload("replace", args));
    };
    let limit = match args.get(3) {
        None => None,
        Some(Value::Int(n)) => usize::try_from(*n).ok(),
        Some(_) => return Err(crate::library::no_overload("replace", args)),
    };
    let found = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old.as_str()).count()
    };
    let count = limit.map_or(found, |l| l.min(found));
    let size = (s.len() as u64).saturating_add((count as u64).saturating_mul(new.len() as u64));
    charge(size / 10)?;
    Ok(Value::String(std::sync::Arc::new(match limit {
        None => s.replace(old.as_str(), new),
        Some(l) => s.replacen(old.as_str(), new, l),
    })))
}

fn is_ident(expr: &IdedExpr, name: &str) -> bool {
    matches!(&expr.expr, Expr::Ident(n) if n == name)
}

impl Instrumenter<'_> {
    /// Whether `expr` is a variable or a selection on one, as opposed to a namespace such as
    /// `sets` in `sets.contains(...)`, which must stay as written for the call to resolve.
    fn is_data_path(&self, expr: &IdedExpr) -> bool {
        let mut e = expr;
        loop {
            match &e.expr {
                Expr::Ident(name) => {
                    return self.env.has_variable(name) || self.scopes.iter().any(|s| s == name)
                }
                Expr::Select(select) => e = &select.operand,
                _ => return true,
            }
        }
    }

    fn expr(&mut self, expr: &mut IdedExpr) {
        match &mut expr.expr {
            Expr::Call(call) => {
                guard(call);
                let charge_operands = !UNCHARGED_OPERANDS.contains(&call.func_name.as_str());
                if let Some(target) = call.target.as_deref_mut() {
                    self.expr(target);
                    if charge_operands
                        && !matches!(target.expr, Expr::Literal(_))
                        && self.is_data_path(target)
                    {
                        wrap(target);
                    }
                }
                for arg in &mut call.args {
                    self.expr(arg);
                    if charge_operands && !matches!(arg.expr, Expr::Literal(_)) {
                        wrap(arg);
                    }
                }
                wrap(expr);
            }
            Expr::Comprehension(c) => {
                self.expr(&mut c.iter_range);
                self.expr(&mut c.accu_init);
                let pushed = 2 + usize::from(c.iter_var2.is_some());
                self.scopes.push(c.iter_var.clone());
                self.scopes.push(c.accu_var.clone());
                if let Some(v) = &c.iter_var2 {
                    self.scopes.push(v.clone());
                }
                self.expr(&mut c.loop_cond);
                let accu = c.accu_var.clone();
                self.step(&mut c.loop_step, &accu);
                self.expr(&mut c.result);
                self.scopes.truncate(self.scopes.len() - pushed);
            }
            Expr::List(list) => {
                for e in &mut list.elements {
                    self.expr(e);
                }
                wrap(expr);
            }
            Expr::Map(map) => {
                for entry in &mut map.entries {
                    if let EntryExpr::MapEntry(e) = &mut entry.expr {
                        self.expr(&mut e.key);
                        self.expr(&mut e.value);
                    }
                }
                wrap(expr);
            }
            Expr::Struct(s) => {
                for entry in &mut s.entries {
                    if let EntryExpr::StructField(f) = &mut entry.expr {
                        self.expr(&mut f.value);
                    }
                }
                wrap(expr);
            }
            Expr::Select(select) => self.expr(&mut select.operand),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    /// A comprehension's loop step: charged once per iteration, in a way that keeps the shapes
    /// the interpreter special-cases.
    fn step(&mut self, step: &mut IdedExpr, accu: &str) {
        if let Expr::Call(call) = &mut step.expr {
            let name = call.func_name.as_str();
            if call.target.is_none() && call.args.len() == 2 && is_ident(&call.args[0], accu) {
                if name == operators::LOGICAL_AND || name == operators::LOGICAL_OR {
                    self.expr(&mut call.args[1]);
                    wrap(&mut call.args[1]);
                    return;
                }
                if name == operators::ADD {
                    if let Expr::List(list) = &mut call.args[1].expr {
                        for e in &mut list.elements {
                            self.expr(e);
                            wrap(e);
                        }
                        return;
                    }
                }
            }
            if name == operators::CONDITIONAL
                && call.target.is_none()
                && call.args.len() == 3
                && is_ident(&call.args[2], accu)
            {
                self.expr(&mut call.args[0]);
                wrap(&mut call.args[0]);
                self.step(&mut call.args[1], accu);
                return;
            }
        }
        self.expr(step);
        if !matches!(step.expr, Expr::Call(_)) {
            wrap(step);
        }
    }
}
