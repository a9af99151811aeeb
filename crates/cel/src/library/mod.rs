//! Kubernetes' CEL libraries (upstream `k8s.io/apiserver/pkg/cel/library` and the cel-go `ext`
//! libraries Kubernetes enables), on top of the `cel` crate's standard library and its `strings`,
//! `lists` and `math` extensions.
//!
//! | library | functions | where |
//! | --- | --- | --- |
//! | strings (cel-go ext) | `charAt`, `indexOf`, `lastIndexOf`, `lowerAscii`, `upperAscii`, `replace`, `split`, `substring`, `trim`, `join`, `format`, `strings.quote`, `reverse` | `cel` crate |
//! | lists (Kubernetes) | `isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf` | [`lists`] |
//! | lists (cel-go ext) | `slice`, `flatten`, `distinct`, `reverse`, `sort`, `sortBy`, `lists.range` | `cel` crate |
//! | math (cel-go ext) | `math.greatest`, `math.least`, `math.ceil`, `math.abs`, `math.bitAnd`, ... | `cel` crate |
//! | sets (cel-go ext) | `sets.contains`, `sets.equivalent`, `sets.intersects` | [`sets`] |
//! | regex (Kubernetes) | `find`, `findAll` (`matches` is standard) | [`regex`] |
//! | URLs | `url`, `isURL`, `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath`, `getQuery` | [`urls`] |
//! | quantity | `quantity`, `isQuantity`, `sign`, `isInteger`, `asInteger`, `asApproximateFloat`, `add`, `sub`, `isGreaterThan`, `isLessThan`, `compareTo` | [`quantity`] |
//! | IP / CIDR | `ip`, `isIP`, `ip.isCanonical`, `family`, `isUnspecified`, `isLoopback`, `isLinkLocalMulticast`, `isLinkLocalUnicast`, `isGlobalUnicast`, `cidr`, `isCIDR`, `containsIP`, `containsCIDR`, `prefixLength`, `masked` | [`net`] |
//! | format | `format.named`, `format.dns1123Label()`, ... `.validate(string)` | [`mod@format`] |
//!
//! Functions charge the running cost budget for the data they walk.

pub mod format;
pub mod lists;
pub mod net;
pub mod quantity;
pub mod regex;
pub mod sets;
pub mod urls;

use std::collections::BTreeSet;
use std::sync::LazyLock;

use cel::common::functions::Function;
use cel::common::types::{Type, DYN_TYPE, INT_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::objects::Opaque;
use cel::{ExecutionError, Value};

use crate::cost;

/// A library function over plain values.
pub(crate) type ValueFn = fn(&[Value]) -> Result<Value, ExecutionError>;

/// Calls `f` with the arguments as [`Value`]s.
pub(crate) fn call<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    f: ValueFn,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let values = args
        .iter()
        .map(|a| Value::try_from(a.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let out: Box<dyn cel::common::value::Val> = f(&values)?.try_into()?;
    Ok(CowVal::Owned(out))
}

/// Registers overloads and remembers the function names for the compile-time check.
pub(crate) struct Registrar<'a> {
    env: &'a mut cel::Env,
    names: &'a mut BTreeSet<String>,
}

impl Registrar<'_> {
    /// A global function `name(args...)`.
    pub(crate) fn global(&mut self, name: &str, id: &str, args: Vec<Type>, op: Function) {
        self.names.insert(name.to_owned());
        // Ids and signatures are unique by construction; a clash is a bug caught by the tests.
        if let Err(e) = self.env.add_overload(name, id, args, op) {
            panic!("CEL library registration: {e}");
        }
    }

    /// A member function `target.name(args...)`.
    pub(crate) fn member(
        &mut self,
        name: &str,
        id: &str,
        target: Type,
        args: Vec<Type>,
        op: Function,
    ) {
        self.names.insert(name.to_owned());
        if let Err(e) = self.env.add_member_overload(name, id, target, args, op) {
            panic!("CEL library registration: {e}");
        }
    }
}

/// `call(args, f)` as an overload (a non-capturing closure, so a plain `fn`).
macro_rules! op {
    ($f:expr) => {
        |args| $crate::library::call(args, $f)
    };
}
pub(crate) use op;

/// Functions of the standard library and the `cel` crate's extensions.
const BUILTIN_FUNCTIONS: &[&str] = &[
    // standard
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "string",
    "int",
    "uint",
    "double",
    "bool",
    "bytes",
    "type",
    "dyn",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    "optMap",
    "optFlatMap",
    // strings extension
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "strings.quote",
    "reverse",
    // lists extension
    "slice",
    "flatten",
    "distinct",
    "sort",
    "lists.range",
    // math extension
    "math.ceil",
    "math.floor",
    "math.round",
    "math.trunc",
    "math.isInf",
    "math.isNaN",
    "math.isFinite",
    "math.abs",
    "math.sign",
    "math.bitAnd",
    "math.bitOr",
    "math.bitXor",
    "math.bitNot",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    "math.greatest",
    "math.least",
    "math.sqrt",
];

struct Built {
    env: cel::Env,
    names: BTreeSet<String>,
}

fn build() -> Built {
    let mut env = cel::Env::stdlib();
    let mut names: BTreeSet<String> = BUILTIN_FUNCTIONS.iter().map(|s| s.to_string()).collect();
    for ext in [
        cel::extensions::strings as fn(&mut cel::Env) -> Result<(), cel::DeclarationError>,
        cel::extensions::lists,
        cel::extensions::math,
    ] {
        if let Err(e) = env.add_extension(ext) {
            panic!("CEL extension registration: {e}");
        }
    }
    // The (internal) cost meter every instrumented node goes through.
    let internal: [(&str, &str, Vec<Type>, Function); 5] = [
        (cost::COST_FN, "@cost_dyn", vec![DYN_TYPE], cost::cost_fn),
        (
            cost::COST_VALUE_FN,
            "@cost_value_dyn",
            vec![DYN_TYPE],
            cost::cost_value_fn,
        ),
        (
            cost::COST_SQUARE_FN,
            "@cost_square_dyn",
            vec![DYN_TYPE],
            cost::cost_square_fn,
        ),
        (
            cost::REPLACE_FN,
            "@replace_3",
            vec![STRING_TYPE, STRING_TYPE, STRING_TYPE],
            op!(cost::replace),
        ),
        (
            cost::REPLACE_FN,
            "@replace_4",
            vec![STRING_TYPE, STRING_TYPE, STRING_TYPE, INT_TYPE],
            op!(cost::replace),
        ),
    ];
    for (name, id, args, f) in internal {
        if let Err(e) = env.add_overload(name, id, args, f) {
            panic!("CEL internal function registration: {e}");
        }
    }
    let mut r = Registrar {
        env: &mut env,
        names: &mut names,
    };
    lists::register(&mut r);
    sets::register(&mut r);
    regex::register(&mut r);
    urls::register(&mut r);
    quantity::register(&mut r);
    net::register(&mut r);
    format::register(&mut r);
    Built { env, names }
}

static NAMES: LazyLock<BTreeSet<String>> = LazyLock::new(|| build().names);

/// A `cel::Env` with every library registered.
pub fn build_env() -> cel::Env {
    build().env
}

/// Whether some library defines a function `name` (namespaced names in full: `sets.contains`).
pub fn is_known_function(name: &str) -> bool {
    NAMES.contains(name)
}

/// A function error with upstream's text.
pub(crate) fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// The "no such overload" error of `function` for `args`.
pub(crate) fn no_overload(function: &str, args: &[Value]) -> ExecutionError {
    ExecutionError::no_such_overload(
        function,
        args.iter().map(|a| type_name(a).to_owned()).collect(),
    )
}

/// The CEL type name of a value.
pub(crate) fn type_name(v: &Value) -> &str {
    match v {
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Function(..) => "function",
        Value::Int(_) => "int",
        Value::UInt(_) => "uint",
        Value::Float(_) => "double",
        Value::String(_) => "string",
        Value::Bytes(_) => "bytes",
        Value::Bool(_) => "bool",
        Value::Duration(_) => "google.protobuf.Duration",
        Value::Timestamp(_) => "google.protobuf.Timestamp",
        Value::Opaque(o) => o.runtime_type_name(),
        Value::Struct(_) => "struct",
        Value::Null => "null_type",
    }
}

/// The argument at `i` as a string.
pub(crate) fn str_arg<'a>(
    function: &str,
    args: &'a [Value],
    i: usize,
) -> Result<&'a str, ExecutionError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.as_str()),
        _ => Err(no_overload(function, args)),
    }
}

/// The argument at `i` as the opaque type `T`.
pub(crate) fn opaque_arg<'a, T: Opaque>(
    function: &str,
    args: &'a [Value],
    i: usize,
) -> Result<&'a T, ExecutionError> {
    match args.get(i) {
        Some(Value::Opaque(o)) => o
            .downcast_ref::<T>()
            .ok_or_else(|| no_overload(function, args)),
        _ => Err(no_overload(function, args)),
    }
}

/// An opaque value of ours as a string (for JSON results and `string(x)`).
pub(crate) fn opaque_string(o: &dyn Opaque) -> Option<String> {
    if let Some(q) = o.downcast_ref::<quantity::QuantityValue>() {
        return Some(q.0.to_string());
    }
    if let Some(ip) = o.downcast_ref::<net::Ip>() {
        return Some(ip.0.to_string());
    }
    if let Some(c) = o.downcast_ref::<net::Cidr>() {
        return Some(c.to_string());
    }
    if let Some(u) = o.downcast_ref::<urls::Url>() {
        return Some(u.raw.clone());
    }
    None
}

/// A duration as protobuf JSON prints it: seconds with up to nine decimals, `s` suffix.
pub(crate) fn format_duration(d: &chrono::Duration) -> String {
    let nanos = d
        .num_nanoseconds()
        .map(i128::from)
        .unwrap_or_else(|| i128::from(d.num_seconds()) * 1_000_000_000);
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = nanos.unsigned_abs();
    let (secs, frac) = (abs / 1_000_000_000, abs % 1_000_000_000);
    if frac == 0 {
        format!("{sign}{secs}s")
    } else {
        let frac = format!("{frac:09}");
        format!("{sign}{secs}.{}s", frac.trim_end_matches('0'))
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::{Activation, Env, EvalError, Program};

    /// Evaluates `expr` (no variables) to JSON.
    pub(crate) fn eval(expr: &str) -> Result<serde_json::Value, EvalError> {
        let program = Program::compile(expr, &Env::new())
            .unwrap_or_else(|e| panic!("{expr} does not compile: {e}"));
        program.eval_json(&Activation::new())
    }

    /// Asserts `expr` evaluates to `true`.
    pub(crate) fn assert_true(expr: &str) {
        assert_eq!(eval(expr), Ok(serde_json::Value::Bool(true)), "{expr}");
    }

    /// The error text of evaluating `expr`.
    pub(crate) fn eval_err(expr: &str) -> String {
        match eval(expr) {
            Ok(v) => panic!("{expr} evaluated to {v}, expected an error"),
            Err(e) => e.to_string(),
        }
    }
}
