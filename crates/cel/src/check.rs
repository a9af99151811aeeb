//! Compile-time checks: syntax, nesting depth, and that every identifier and function an
//! expression uses exists. (Upstream's type checker does much more; see the crate docs.)

use cel::common::ast::{EntryExpr, Expr, SourceInfo};
use cel::IdedExpr;

use crate::{library, CompileError, Env};

/// Type names usable as identifiers (`type(x) == int`).
const TYPE_IDENTS: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "optional_type",
];

/// Whether the parser would recurse deeper than `limit` on `source` (an upper bound, from its
/// tokens alone).
///
/// The grammar nests one level per binary operator of a chain (`a + b + c`, `a < b`, member
/// selections and calls: left-recursive rules), per `?:`, and per bracket; `&&`, `||` and `,`
/// chains are flat. The parser recurses per level, so a long operator chain would overflow the
/// stack before any limit of the parser applies: this bound is checked before parsing.
fn parse_depth_exceeds(source: &str, limit: usize) -> bool {
    // Per open bracket, the operators counted since its last separator; `total` is their sum.
    let mut frames: Vec<usize> = vec![0];
    let mut total = 0usize;
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                // Skip a string literal (triple quotes too: their content has no structure).
                let mut escaped = false;
                for d in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == c {
                        break;
                    }
                }
            }
            '(' | '[' | '{' => {
                if let Some(top) = frames.last_mut() {
                    *top += 1;
                    total += 1;
                }
                frames.push(0);
            }
            ')' | ']' | '}' if frames.len() > 1 => {
                total -= frames.pop().unwrap_or(0);
            }
            ',' => {
                if let Some(top) = frames.last_mut() {
                    total -= *top;
                    *top = 0;
                }
            }
            '&' | '|' if chars.peek() == Some(&c) => {
                chars.next();
                if let Some(top) = frames.last_mut() {
                    total -= *top;
                    *top = 0;
                }
            }
            '+' | '-' | '*' | '/' | '%' | '<' | '>' | '=' | '!' | '.' | '?' => {
                // `==`, `<=`, `!=`, `>=`: one operator.
                if matches!(c, '<' | '>' | '=' | '!') && chars.peek() == Some(&'=') {
                    chars.next();
                }
                if let Some(top) = frames.last_mut() {
                    *top += 1;
                    total += 1;
                }
            }
            _ => {}
        }
        if total + frames.len() > limit {
            return true;
        }
    }
    false
}

/// Parses `source` with `env`'s macros and the nesting limit.
pub(crate) fn parse(source: &str, env: &Env) -> Result<(IdedExpr, SourceInfo), CompileError> {
    let limit = env.limits.max_nesting_depth;
    if parse_depth_exceeds(source, limit) {
        return Err(CompileError::TooDeep { limit });
    }
    // The parser's own limit counts parenthesised/nested sub-expressions; the tree depth check
    // below catches long operator chains (`1 + 1 + ...`), which nest without parentheses.
    let parser = env
        .cel
        .parser()
        .max_recursion_depth(u16::try_from(limit).unwrap_or(u16::MAX - 1));
    let (expr, info) = parser
        .parse_with_source_info(source)
        .map_err(|e| CompileError::Syntax(e.to_string()))?;
    if depth_exceeds(&expr, limit) {
        return Err(CompileError::TooDeep { limit });
    }
    Ok((expr, info))
}

/// The children of an expression node.
pub(crate) fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => map
            .entries
            .iter()
            .flat_map(|e| match &e.expr {
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Struct(s) => s
            .entries
            .iter()
            .flat_map(|e| match &e.expr {
                EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
                EntryExpr::StructField(f) => vec![&f.value],
            })
            .collect(),
        Expr::Select(select) => vec![&select.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

/// Whether the tree is deeper than `limit`; iterative, so a deep tree cannot overflow the stack
/// here.
fn depth_exceeds(expr: &IdedExpr, limit: usize) -> bool {
    let mut stack = vec![(expr, 1usize)];
    while let Some((e, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        stack.extend(children(e).into_iter().map(|c| (c, depth + 1)));
    }
    false
}

/// Whether `expr` refers to the free variable `name`.
pub(crate) fn uses_variable(expr: &IdedExpr, name: &str) -> bool {
    match &expr.expr {
        Expr::Ident(n) => n == name,
        Expr::Comprehension(c) => {
            if uses_variable(&c.iter_range, name) || uses_variable(&c.accu_init, name) {
                return true;
            }
            let shadowed =
                c.iter_var == name || c.accu_var == name || c.iter_var2.as_deref() == Some(name);
            !shadowed
                && [&c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .any(|e| uses_variable(e, name))
        }
        _ => children(expr).into_iter().any(|c| uses_variable(c, name)),
    }
}

/// Line and column (1-based, in characters) of a node.
pub(crate) fn position(info: &SourceInfo, id: u64) -> (u32, u32) {
    let Some((start, _)) = info.offset_for(id) else {
        return (1, 1);
    };
    let (mut line, mut column) = (1u32, 1u32);
    for c in info.source.chars().take(start as usize) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// The dotted name `expr` spells (`a.b.c`), if it is an identifier or selections on one.
fn qualified_name(expr: &IdedExpr) -> Option<String> {
    match &expr.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) if !s.test => Some(format!("{}.{}", qualified_name(&s.operand)?, s.field)),
        _ => None,
    }
}

/// The root identifier of a selection chain.
fn root_ident(expr: &IdedExpr) -> Option<&str> {
    match &expr.expr {
        Expr::Ident(name) => Some(name),
        Expr::Select(s) => root_ident(&s.operand),
        _ => None,
    }
}

struct Checker<'a> {
    env: &'a Env,
    info: &'a SourceInfo,
    scopes: Vec<String>,
}

/// Checks that every identifier and function `expr` uses is declared.
pub(crate) fn check_references(
    (expr, info): &(IdedExpr, SourceInfo),
    env: &Env,
    _source: &str,
) -> Result<(), CompileError> {
    Checker {
        env,
        info,
        scopes: Vec::new(),
    }
    .check(expr)?;
    crate::shape::check_fields(expr, info, env)
}

impl Checker<'_> {
    fn in_scope(&self, name: &str) -> bool {
        self.env.has_variable(name) || self.scopes.iter().any(|s| s == name)
    }

    fn undeclared(&self, name: &str, id: u64) -> CompileError {
        let (line, column) = position(self.info, id);
        CompileError::UndeclaredReference {
            name: name.to_owned(),
            line,
            column,
        }
    }

    fn check(&mut self, expr: &IdedExpr) -> Result<(), CompileError> {
        match &expr.expr {
            Expr::Ident(name) => {
                if !self.in_scope(name) && !TYPE_IDENTS.contains(&name.as_str()) {
                    return Err(self.undeclared(name, expr.id));
                }
                Ok(())
            }
            Expr::Select(select) => {
                // `variables.<name>`: only declared composition variables.
                if let (Expr::Ident(root), Some(names)) =
                    (&select.operand.expr, &self.env.composition)
                {
                    if root == "variables"
                        && !self.scopes.iter().any(|s| s == "variables")
                        && !names.contains(&select.field)
                    {
                        let (line, column) = position(self.info, expr.id);
                        return Err(CompileError::UndefinedField {
                            name: select.field.clone(),
                            line,
                            column,
                        });
                    }
                }
                self.check(&select.operand)
            }
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                let operator =
                    name.starts_with('_') || name.starts_with('@') || name == "!_" || name == "-_";
                match call.target.as_deref() {
                    // `ns.f(...)`: a namespaced function when `ns` is no variable.
                    Some(target)
                        if root_ident(target).is_some_and(|r| !self.in_scope(r))
                            && qualified_name(target).is_some_and(|q| {
                                library::is_known_function(&format!("{q}.{name}"))
                            }) => {}
                    Some(target) => {
                        if !operator && !library::is_known_function(name) {
                            return Err(self.undeclared(name, expr.id));
                        }
                        self.check(target)?;
                    }
                    None => {
                        if !operator && !library::is_known_function(name) {
                            return Err(self.undeclared(name, expr.id));
                        }
                    }
                }
                for arg in &call.args {
                    self.check(arg)?;
                }
                Ok(())
            }
            Expr::Comprehension(c) => {
                self.check(&c.iter_range)?;
                self.check(&c.accu_init)?;
                let before = self.scopes.len();
                self.scopes.push(c.iter_var.clone());
                if let Some(v) = &c.iter_var2 {
                    self.scopes.push(v.clone());
                }
                self.scopes.push(c.accu_var.clone());
                let result = self
                    .check(&c.loop_cond)
                    .and_then(|()| self.check(&c.loop_step))
                    .and_then(|()| self.check(&c.result));
                self.scopes.truncate(before);
                result
            }
            Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => {
                for child in children(expr) {
                    self.check(child)?;
                }
                Ok(())
            }
            Expr::Literal(_) | Expr::Unspecified => Ok(()),
        }
    }
}
