//! Kubernetes' regex library (upstream `library/regex.go`): `s.find(re)` (the first match, or
//! `""`), `s.findAll(re)` and `s.findAll(re, limit)` (all matches, at most `limit` when it is not
//! negative). `matches` is in the standard library.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{INT_TYPE, STRING_TYPE};
use cel::{ExecutionError, Value};

use super::{error, no_overload, op, str_arg, Registrar};
use crate::cost::charge;

pub(crate) fn register(r: &mut Registrar<'_>) {
    r.member(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        op!(find),
    );
    r.member(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        op!(find_all),
    );
    r.member(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        op!(find_all),
    );
}

/// Compiled patterns kept per thread; bounded so distinct patterns cannot grow it without limit.
const CACHE_ENTRIES: usize = 64;
/// The compiled size a pattern may take.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

thread_local! {
    static CACHE: RefCell<HashMap<String, Arc<::regex::Regex>>> = RefCell::new(HashMap::new());
}

/// `pattern` compiled (RE2 syntax, as Go's `regexp`), cached.
pub(crate) fn compile(
    function: &str,
    pattern: &str,
) -> Result<Arc<::regex::Regex>, ExecutionError> {
    if let Some(re) = CACHE.with(|c| c.borrow().get(pattern).cloned()) {
        return Ok(re);
    }
    charge(pattern.len() as u64)?;
    let re = ::regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| error(function, format!("error parsing regexp: {e}")))?;
    let re = Arc::new(re);
    CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(pattern.to_owned(), re.clone());
    });
    Ok(re)
}

fn find(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = str_arg("find", args, 0)?;
    let re = compile("find", str_arg("find", args, 1)?)?;
    charge(s.len() as u64 / 10)?;
    Ok(Value::String(Arc::new(
        re.find(s)
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default(),
    )))
}

fn find_all(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = str_arg("findAll", args, 0)?;
    let re = compile("findAll", str_arg("findAll", args, 1)?)?;
    let limit = match args.get(2) {
        None => usize::MAX,
        Some(Value::Int(n)) if *n < 0 => usize::MAX,
        Some(Value::Int(n)) => usize::try_from(*n).unwrap_or(usize::MAX),
        Some(_) => return Err(no_overload("findAll", args)),
    };
    charge(s.len() as u64 / 10)?;
    let found = re
        .find_iter(s)
        .take(limit)
        .map(|m| Value::String(Arc::new(m.as_str().to_owned())))
        .collect::<Vec<_>>();
    charge(found.len() as u64)?;
    Ok(Value::List(Arc::new(found)))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::{assert_true, eval_err};

    #[test]
    fn find() {
        assert_true("'abc 123'.find('[0-9]+') == '123'");
        assert_true("'abc'.find('[0-9]+') == ''");
        assert_true("'123 abc 456'.findAll('[0-9]+') == ['123', '456']");
        assert_true("'123 abc 456'.findAll('[0-9]+', 1) == ['123']");
        assert_true("'123 abc 456'.findAll('[0-9]+', -1) == ['123', '456']");
        assert_true("'123 abc 456'.findAll('[0-9]+', 0) == []");
        assert_true("'abc'.matches('^[a-c]+$')");
        assert!(eval_err("'abc'.find('[')").contains("error parsing regexp"));
    }
}
