//! The cel-go `sets` extension: `sets.contains(a, b)` (every element of `b` is in `a`),
//! `sets.equivalent(a, b)` (same elements, duplicates ignored), `sets.intersects(a, b)`.

use cel::common::types::LIST_TYPE;
use cel::{ExecutionError, Value};

use super::{no_overload, op, Registrar};
use crate::cost::charge;

pub(crate) fn register(r: &mut Registrar<'_>) {
    let lists = || vec![LIST_TYPE, LIST_TYPE];
    r.global(
        "sets.contains",
        "list_sets_contains_list",
        lists(),
        op!(contains),
    );
    r.global(
        "sets.equivalent",
        "list_sets_equivalent_list",
        lists(),
        op!(equivalent),
    );
    r.global(
        "sets.intersects",
        "list_sets_intersects_list",
        lists(),
        op!(intersects),
    );
}

fn lists<'a>(
    function: &str,
    args: &'a [Value],
) -> Result<(&'a [Value], &'a [Value]), ExecutionError> {
    match args {
        [Value::List(a), Value::List(b)] => {
            // Pairwise comparison: charge for the work it does.
            charge((a.len() as u64).saturating_mul(b.len() as u64))?;
            Ok((a.as_slice(), b.as_slice()))
        }
        _ => Err(no_overload(function, args)),
    }
}

fn contains_all(a: &[Value], b: &[Value]) -> bool {
    b.iter().all(|x| a.contains(x))
}

fn contains(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = lists("sets.contains", args)?;
    Ok(Value::Bool(contains_all(a, b)))
}

fn equivalent(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = lists("sets.equivalent", args)?;
    Ok(Value::Bool(contains_all(a, b) && contains_all(b, a)))
}

fn intersects(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = lists("sets.intersects", args)?;
    Ok(Value::Bool(b.iter().any(|x| a.contains(x))))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::assert_true;

    #[test]
    fn sets() {
        assert_true("sets.contains([1, 2, 3], [2, 3])");
        assert_true("!sets.contains([1, 2], [3])");
        assert_true("sets.contains([1], [])");
        assert_true("sets.contains([1, 2.0], [1u, 2])");
        assert_true("sets.equivalent([1, 2, 2], [2, 1])");
        assert_true("!sets.equivalent([1, 2], [1])");
        assert_true("sets.intersects([1, 2], [2, 5])");
        assert_true("!sets.intersects([1], [])");
    }
}
