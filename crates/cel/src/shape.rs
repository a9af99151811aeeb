//! Field checking against declared shapes: what upstream's type checker reports as `undefined
//! field 'x'` when an expression selects a field an object type does not declare (a CRD rule's
//! `self.replicsa`). Only field selections are checked; operand and result types are not.

use std::collections::BTreeMap;
use std::sync::Arc;

use cel::common::ast::{operators, Expr, SourceInfo};
use cel::IdedExpr;

use crate::check::{children, position};
use crate::{CompileError, Env};

/// The shape of a variable's values, as far as the compile-time check knows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Shape {
    /// Unknown: anything may be selected.
    #[default]
    Any,
    /// A scalar (selecting on it is left to runtime).
    Scalar,
    /// An object with exactly these fields.
    Object(Arc<BTreeMap<String, Shape>>),
    /// A map from strings to values of one shape (any key may be selected).
    Map(Arc<Shape>),
    /// A list of values of one shape.
    List(Arc<Shape>),
}

impl Shape {
    pub fn object(fields: impl IntoIterator<Item = (String, Shape)>) -> Shape {
        Shape::Object(Arc::new(fields.into_iter().collect()))
    }

    pub fn map(values: Shape) -> Shape {
        Shape::Map(Arc::new(values))
    }

    pub fn list(items: Shape) -> Shape {
        Shape::List(Arc::new(items))
    }

    /// The shape of an element when iterating (a comprehension's variable).
    fn element(&self) -> Shape {
        match self {
            Shape::List(e) => (**e).clone(),
            Shape::Map(_) => Shape::Scalar,
            _ => Shape::Any,
        }
    }
}

/// Checks the field selections of `expr` against the shapes `env` declares.
pub(crate) fn check_fields(
    expr: &IdedExpr,
    info: &SourceInfo,
    env: &Env,
) -> Result<(), CompileError> {
    if env.shapes.is_empty() {
        return Ok(());
    }
    ShapeChecker {
        env,
        info,
        scopes: Vec::new(),
    }
    .shape(expr)
    .map(|_| ())
}

struct ShapeChecker<'a> {
    env: &'a Env,
    info: &'a SourceInfo,
    scopes: Vec<(String, Shape)>,
}

impl ShapeChecker<'_> {
    fn shape(&mut self, expr: &IdedExpr) -> Result<Shape, CompileError> {
        match &expr.expr {
            Expr::Ident(name) => Ok(self
                .scopes
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.clone())
                .or_else(|| self.env.shapes.get(name).cloned())
                .unwrap_or_default()),
            Expr::Select(select) => match self.shape(&select.operand)? {
                Shape::Object(fields) => match fields.get(&select.field) {
                    Some(s) if !select.test => Ok(s.clone()),
                    Some(_) => Ok(Shape::Scalar),
                    None => {
                        let (line, column) = position(self.info, expr.id);
                        Err(CompileError::UndefinedField {
                            name: select.field.clone(),
                            line,
                            column,
                        })
                    }
                },
                Shape::Map(values) if !select.test => Ok((*values).clone()),
                _ => Ok(Shape::Any),
            },
            Expr::Call(call)
                if call.func_name == operators::INDEX
                    && call.target.is_none()
                    && call.args.len() == 2 =>
            {
                let base = self.shape(&call.args[0])?;
                self.shape(&call.args[1])?;
                Ok(match base {
                    Shape::List(e) => (*e).clone(),
                    Shape::Map(v) => (*v).clone(),
                    _ => Shape::Any,
                })
            }
            Expr::Comprehension(c) => {
                let range = self.shape(&c.iter_range)?;
                self.shape(&c.accu_init)?;
                let before = self.scopes.len();
                match (&c.iter_var2, &range) {
                    // Two variables: index and item of a list, key and value of a map.
                    (Some(second), Shape::List(e)) => {
                        self.scopes.push((c.iter_var.clone(), Shape::Scalar));
                        self.scopes.push((second.clone(), (**e).clone()));
                    }
                    (Some(second), Shape::Map(v)) => {
                        self.scopes.push((c.iter_var.clone(), Shape::Scalar));
                        self.scopes.push((second.clone(), (**v).clone()));
                    }
                    (Some(second), _) => {
                        self.scopes.push((c.iter_var.clone(), Shape::Any));
                        self.scopes.push((second.clone(), Shape::Any));
                    }
                    (None, _) => self.scopes.push((c.iter_var.clone(), range.element())),
                }
                self.scopes.push((c.accu_var.clone(), Shape::Any));
                let result = [&c.loop_cond, &c.loop_step, &c.result]
                    .into_iter()
                    .try_for_each(|e| self.shape(e).map(|_| ()));
                self.scopes.truncate(before);
                result.map(|()| Shape::Any)
            }
            Expr::Literal(_) => Ok(Shape::Scalar),
            _ => {
                for child in children(expr) {
                    self.shape(child)?;
                }
                Ok(Shape::Any)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Program;

    fn env() -> Env {
        let item = Shape::object([("name".to_owned(), Shape::Scalar)]);
        Env::new().with_variable_shape(
            "self",
            Shape::object([
                ("replicas".to_owned(), Shape::Scalar),
                ("items".to_owned(), Shape::list(item.clone())),
                ("byName".to_owned(), Shape::map(item)),
                ("free".to_owned(), Shape::Any),
            ]),
        )
    }

    fn err(expr: &str) -> String {
        Program::compile(expr, &env()).unwrap_err().to_string()
    }

    #[test]
    fn undeclared_fields_are_refused() {
        for ok in [
            "self.replicas > 0",
            "has(self.replicas)",
            "self.items.all(i, i.name != '')",
            "self.items[0].name == ''",
            "self.byName['a'].name == '' && self.byName.b.name == ''",
            "self.byName.all(k, k != '')",
            "self.free.anything.goes",
            "[{'x': 1}].all(m, m.x == 1)",
        ] {
            Program::compile(ok, &env()).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(
            err("self.replicsa > 0"),
            "ERROR: <input>:1:5: undefined field 'replicsa'"
        );
        assert!(err("has(self.nope)").contains("undefined field 'nope'"));
        assert!(err("self.items.all(i, i.nmae != '')").contains("undefined field 'nmae'"));
        assert!(err("self.byName['a'].nmae == ''").contains("undefined field 'nmae'"));
    }
}
