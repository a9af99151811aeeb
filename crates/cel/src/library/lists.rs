//! Kubernetes' list library (upstream `library/lists.go`): `isSorted`, `sum`, `min`, `max`,
//! `indexOf`, `lastIndexOf` as members of a list.

use std::cmp::Ordering;
use std::sync::Arc;

use cel::common::types::{DYN_TYPE, LIST_TYPE};
use cel::{ExecutionError, Value};

use super::{error, no_overload, op, Registrar};
use crate::cost::charge;

pub(crate) fn register(r: &mut Registrar<'_>) {
    r.member(
        "isSorted",
        "list_is_sorted",
        LIST_TYPE,
        vec![],
        op!(is_sorted),
    );
    r.member("sum", "list_sum", LIST_TYPE, vec![], op!(sum));
    r.member("min", "list_min", LIST_TYPE, vec![], op!(min));
    r.member("max", "list_max", LIST_TYPE, vec![], op!(max));
    r.member(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        op!(index_of),
    );
    r.member(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        op!(last_index_of),
    );
}

fn list<'a>(function: &str, args: &'a [Value]) -> Result<&'a Arc<Vec<Value>>, ExecutionError> {
    match args.first() {
        Some(Value::List(items)) => {
            charge(items.len() as u64)?;
            Ok(items)
        }
        _ => Err(no_overload(function, args)),
    }
}

/// Whether a value is of a comparable type (upstream's `comparableTypes`).
fn comparable(v: &Value) -> bool {
    matches!(
        v,
        Value::Int(_)
            | Value::UInt(_)
            | Value::Float(_)
            | Value::Bool(_)
            | Value::Duration(_)
            | Value::Timestamp(_)
            | Value::String(_)
            | Value::Bytes(_)
    )
}

fn compare(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    if let (Value::Bytes(x), Value::Bytes(y)) = (a, b) {
        return Ok(x.cmp(y));
    }
    a.partial_cmp(b)
        .ok_or_else(|| no_overload(function, &[a.clone(), b.clone()]))
}

fn is_sorted(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list("isSorted", args)?;
    for pair in items.windows(2) {
        if !comparable(&pair[0]) {
            return Err(no_overload("isSorted", args));
        }
        if compare("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

fn add(a: &Value, b: &Value) -> Result<Value, ExecutionError> {
    let overflow = || error("sum", "integer overflow");
    Ok(match (a, b) {
        (Value::Int(x), Value::Int(y)) => Value::Int(x.checked_add(*y).ok_or_else(overflow)?),
        (Value::UInt(x), Value::UInt(y)) => Value::UInt(x.checked_add(*y).ok_or_else(overflow)?),
        (Value::Float(x), Value::Float(y)) => Value::Float(x + y),
        (Value::Duration(x), Value::Duration(y)) => {
            Value::Duration(x.checked_add(y).ok_or_else(overflow)?)
        }
        _ => return Err(no_overload("sum", &[a.clone(), b.clone()])),
    })
}

fn sum(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list("sum", args)?;
    let mut iter = items.iter();
    // An empty list sums to the zero of its element type; untyped here, so int 0.
    let Some(first) = iter.next() else {
        return Ok(Value::Int(0));
    };
    if !matches!(
        first,
        Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Duration(_)
    ) {
        return Err(no_overload("sum", args));
    }
    let mut acc = first.clone();
    for item in iter {
        acc = add(&acc, item)?;
    }
    Ok(acc)
}

fn extreme(function: &str, args: &[Value], prefer: Ordering) -> Result<Value, ExecutionError> {
    let items = list(function, args)?;
    let mut best: Option<&Value> = None;
    for item in items.iter() {
        if !comparable(item) {
            return Err(no_overload(function, args));
        }
        best = match best {
            Some(b) if compare(function, b, item)? != prefer => Some(b),
            _ => Some(item),
        };
    }
    best.cloned()
        .ok_or_else(|| error(function, format!("{function} called on empty list")))
}

fn min(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("min", args, Ordering::Greater)
}

fn max(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme("max", args, Ordering::Less)
}

fn index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list("indexOf", args)?;
    let item = &args[1];
    Ok(Value::Int(
        items
            .iter()
            .position(|v| v == item)
            .map_or(-1, |i| i as i64),
    ))
}

fn last_index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list("lastIndexOf", args)?;
    let item = &args[1];
    Ok(Value::Int(
        items
            .iter()
            .rposition(|v| v == item)
            .map_or(-1, |i| i as i64),
    ))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::{assert_true, eval_err};

    #[test]
    fn is_sorted() {
        assert_true("[1, 2, 2, 3].isSorted()");
        assert_true("![2, 1].isSorted()");
        assert_true("['a', 'b'].isSorted()");
        assert_true("[].isSorted()");
        assert_true("[1.0, 2.5].isSorted()");
    }

    #[test]
    fn sum_min_max() {
        assert_true("[1, 2, 3].sum() == 6");
        assert_true("[1.5, 2.5].sum() == 4.0");
        assert_true("[].sum() == 0");
        assert_true("[3, 1, 2].min() == 1");
        assert_true("[3, 1, 2].max() == 3");
        assert_true("['b', 'a'].min() == 'a'");
        assert!(eval_err("[].min()").contains("min called on empty list"));
        assert!(eval_err("[9223372036854775807, 1].sum()").contains("overflow"));
    }

    #[test]
    fn index_of() {
        assert_true("[1, 2, 2, 3].indexOf(2) == 1");
        assert_true("[1, 2, 2, 3].lastIndexOf(2) == 2");
        assert_true("[1, 2].indexOf(5) == -1");
        assert_true("['a', 'b'].indexOf('b') == 1");
        // the strings extension's indexOf still works beside it
        assert_true("'abcb'.indexOf('b') == 1");
        assert_true("'abcb'.lastIndexOf('b') == 3");
    }
}
