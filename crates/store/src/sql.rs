//! Building statements with a variable number of bound parameters.

use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AssertSqlSafe};

use crate::Dialect;

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

    /// A `LIMIT` or `OFFSET` row count. On SQLite it is written into the text: SQLite's
    /// planner reads a bound LIMIT's value, so binding that parameter again expires the
    /// statement and each execution compiles it anew (a fifth of the engine benchmark's CPU
    /// went to that). Postgres does not prepare a statement again for a new value: there it
    /// stays a parameter, so one prepared statement serves every count.
    pub fn count(&mut self, dialect: Dialect, v: i64) -> String {
        match dialect {
            Dialect::Sqlite => v.to_string(),
            Dialect::Postgres => self.int(v),
        }
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
