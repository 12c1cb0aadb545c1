//! Building statements with a variable number of bound parameters.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AssertSqlSafe};

#[derive(Debug, Clone)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
    Float(f64),
}

/// Parameters collected while a statement is built; each `push` returns its `$n` placeholder.
#[derive(Debug, Default)]
pub(crate) struct Params(Vec<Param>);

impl Params {
    pub fn text(&mut self, v: impl Into<String>) -> String {
        self.0.push(Param::Text(v.into()));
        format!("${}", self.0.len())
    }
    pub fn int(&mut self, v: i64) -> String {
        self.0.push(Param::Int(v));
        format!("${}", self.0.len())
    }
    pub fn float(&mut self, v: f64) -> String {
        self.0.push(Param::Float(v));
        format!("${}", self.0.len())
    }

    /// A query over `sql` (built only from our own fragments and placeholders) with these
    /// parameters bound.
    pub fn query(self, sql: String) -> Query<'static, Any, AnyArguments> {
        let mut q = sqlx::query(AssertSqlSafe(sql));
        for p in self.0 {
            q = match p {
                Param::Text(s) => q.bind(s),
                Param::Int(i) => q.bind(i),
                Param::Float(f) => q.bind(f),
            };
        }
        q
    }
}
