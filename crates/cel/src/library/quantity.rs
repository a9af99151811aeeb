//! Kubernetes' quantity library (upstream `library/quantity.go`): `quantity(s)`, `isQuantity(s)`,
//! and on a quantity `sign()`, `isInteger()`, `asInteger()`, `asApproximateFloat()`, `add(q|int)`,
//! `sub(q|int)`, `isGreaterThan(q)`, `isLessThan(q)`, `compareTo(q)`. Quantities compare equal
//! (`==`) when their values are equal, whatever their suffixes.
//!
//! Not done: 1.36's `mul`, `div` and `divInt` (the shared `Quantity` type has no exact
//! multiplication/division yet).

use std::sync::Arc;

use apimachinery::quantity::{Format, Quantity};
use cel::common::types::{Type, INT_TYPE, STRING_TYPE};
use cel::{ExecutionError, Value};

use super::{error, no_overload, op, opaque_arg, str_arg, Registrar};

/// A resource quantity (`kubernetes.Quantity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityValue(pub(crate) Quantity);

pub(crate) const TYPE_NAME: &str = "kubernetes.Quantity";

impl cel::objects::Opaque for QuantityValue {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

fn quantity_type() -> Type {
    Type::new_opaque_type(TYPE_NAME)
}

pub(crate) fn register(r: &mut Registrar<'_>) {
    let q = quantity_type;
    r.global(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        op!(parse),
    );
    r.global(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        op!(is_quantity),
    );
    r.global("sign", "quantity_sign", vec![q()], op!(sign));
    r.member("sign", "quantity_sign_member", q(), vec![], op!(sign));
    r.member(
        "isInteger",
        "quantity_is_integer",
        q(),
        vec![],
        op!(is_integer),
    );
    r.member(
        "asInteger",
        "quantity_get_int",
        q(),
        vec![],
        op!(as_integer),
    );
    r.member(
        "asApproximateFloat",
        "quantity_get_float",
        q(),
        vec![],
        op!(as_float),
    );
    r.member("add", "quantity_add", q(), vec![q()], op!(add));
    r.member("add", "quantity_add_int", q(), vec![INT_TYPE], op!(add));
    r.member("sub", "quantity_sub", q(), vec![q()], op!(sub));
    r.member("sub", "quantity_sub_int", q(), vec![INT_TYPE], op!(sub));
    r.member(
        "isGreaterThan",
        "quantity_is_greater_than",
        q(),
        vec![q()],
        op!(greater),
    );
    r.member(
        "isLessThan",
        "quantity_is_less_than",
        q(),
        vec![q()],
        op!(less),
    );
    r.member(
        "compareTo",
        "quantity_compare_to",
        q(),
        vec![q()],
        op!(compare_to),
    );
}

fn value(q: Quantity) -> Value {
    Value::Opaque(Arc::new(QuantityValue(q)))
}

fn this<'a>(function: &str, args: &'a [Value]) -> Result<&'a Quantity, ExecutionError> {
    opaque_arg::<QuantityValue>(function, args, 0).map(|q| &q.0)
}

/// The second operand: a quantity, or an int as a quantity (upstream `NewQuantity(i,
/// DecimalExponent)`).
fn other(function: &str, args: &[Value]) -> Result<Quantity, ExecutionError> {
    match args.get(1) {
        Some(Value::Int(i)) => Ok(Quantity::new(*i, Format::DecimalExponent)),
        _ => opaque_arg::<QuantityValue>(function, args, 1).map(|q| q.0),
    }
}

fn parse(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = str_arg("quantity", args, 0)?;
    Quantity::parse(s)
        .map(value)
        .map_err(|e| error("quantity", e))
}

fn is_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = str_arg("isQuantity", args, 0)?;
    Ok(Value::Bool(Quantity::parse(s).is_ok()))
}

fn sign(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(i64::from(this("sign", args)?.sign())))
}

/// The value as an int64 when it is a whole number that fits (upstream `AsInt64`).
fn as_i64(q: &Quantity) -> Option<i64> {
    let v = q.value();
    (Quantity::new(v, q.format()) == *q).then_some(v)
}

fn is_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(as_i64(this("isInteger", args)?).is_some()))
}

fn as_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    as_i64(this("asInteger", args)?)
        .map(Value::Int)
        .ok_or_else(|| error("asInteger", "cannot convert value to integer"))
}

fn as_float(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Float(this("asApproximateFloat", args)?.as_f64()))
}

fn add(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = this("add", args)?;
    Ok(value(q.add(&other("add", args)?)))
}

fn sub(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = this("sub", args)?;
    Ok(value(q.sub(&other("sub", args)?)))
}

fn compare(function: &str, args: &[Value]) -> Result<std::cmp::Ordering, ExecutionError> {
    let q = this(function, args)?;
    let o =
        opaque_arg::<QuantityValue>(function, args, 1).map_err(|_| no_overload(function, args))?;
    Ok(q.cmp(&o.0))
}

fn greater(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(compare("isGreaterThan", args)?.is_gt()))
}

fn less(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(compare("isLessThan", args)?.is_lt()))
}

fn compare_to(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(compare("compareTo", args)? as i64))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::{assert_true, eval, eval_err};
    use serde_json::json;

    #[test]
    fn parse_and_inspect() {
        assert_true("isQuantity('1.5Gi')");
        assert_true("!isQuantity('1.5 Gi')");
        assert_true("quantity('2k').asInteger() == 2000");
        assert_true("quantity('1500m').isInteger() == false");
        assert_true("quantity('1.5').asApproximateFloat() == 1.5");
        assert_true("quantity('-3').sign() == -1 && sign(quantity('0')) == 0");
        assert!(
            eval_err("quantity('1500m').asInteger()").contains("cannot convert value to integer")
        );
        assert!(
            eval_err("quantity('abc')").contains("quantities must match the regular expression")
        );
        assert!(
            eval_err("quantity('100000000000000000000').asInteger()").contains("cannot convert")
        );
    }

    #[test]
    fn arithmetic_and_comparison() {
        assert_true("quantity('1Gi').isGreaterThan(quantity('1G'))");
        assert_true("quantity('1').isLessThan(quantity('1001m'))");
        assert_true("quantity('1').compareTo(quantity('1000m')) == 0");
        assert_true("quantity('1') == quantity('1000m')");
        assert_true("quantity('2').compareTo(quantity('1')) == 1");
        assert_true("quantity('1').add(quantity('500m')) == quantity('1.5')");
        assert_true("quantity('1').add(2) == quantity('3')");
        assert_true("quantity('1').sub(2).sign() == -1");
        assert_eq!(
            eval("quantity('1Gi').add(quantity('1Gi'))"),
            Ok(json!("2Gi"))
        );
    }
}
