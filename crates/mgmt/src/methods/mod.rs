//! The management API's methods, named after the objects they act on
//! (`subsystem_create`, `namespace_resize`, ...), declared once: each is a
//! [`MethodDef`] (name, summary, parameters, handler, and how `farflash
//! ctl` prints its result) in one of the modules' `METHODS` slices, and
//! [`GROUPS`] concatenates them. `rpc_methods`, dispatch ([`Api::call`]) and
//! `ctl`'s text output ([`print_human`]) all read that table; a unit test
//! checks docs/rpc-schema.json against it. Every change goes through
//! `farflash_control::manage` (and so through the path `SIGHUP` takes).

mod config;
mod hosts;
pub mod human;
mod subsystems;
mod target;
pub mod volumes;

use crate::jsonrpc::{self, Request, RpcError};
use farflash_control::manage::ManageError;
use farflash_control::reload::{ApplyError, ListenerControl, ReloadReport};
use farflash_core::config::ConfigError;
use farflash_core::subsystem::BuildError;
use farflash_core::Target;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::sync::Arc;

/// What a method does with its parameters: the answer, or the error.
pub type Handler = fn(&Api, &Value) -> Result<Value, RpcError>;

/// How `farflash ctl` prints a method's result as text.
pub type Human = fn(&mut dyn std::io::Write, &Value) -> std::io::Result<()>;

/// One parameter of a method: its name and whether it must be given
/// (checked against docs/rpc-schema.json; the handler's parameter struct
/// is what parses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    name: &'static str,
    required: bool,
}

impl Param {
    /// A parameter the caller must give.
    pub const fn req(name: &'static str) -> Param {
        Param {
            name,
            required: true,
        }
    }

    /// A parameter the caller may leave out.
    pub const fn opt(name: &'static str) -> Param {
        Param {
            name,
            required: false,
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn required(&self) -> bool {
        self.required
    }
}

/// One management method, declared once.
pub struct MethodDef {
    name: &'static str,
    summary: &'static str,
    params: &'static [Param],
    handler: Handler,
    human: Human,
    /// Changes nothing a configuration holds (`--autosave` skips it).
    read_only: bool,
}

impl MethodDef {
    /// A method whose result `ctl` prints as a change report
    /// ([`human::change`]); [`MethodDef::with_human`] gives another printer.
    pub const fn new(
        name: &'static str,
        summary: &'static str,
        params: &'static [Param],
        handler: Handler,
    ) -> MethodDef {
        MethodDef {
            name,
            summary,
            params,
            handler,
            human: human::change,
            read_only: false,
        }
    }

    /// The same method, marked as changing nothing a configuration holds
    /// (a list, a get, statistics).
    pub const fn read_only(self) -> MethodDef {
        MethodDef {
            read_only: true,
            ..self
        }
    }

    /// Whether a successful call may have changed the configuration
    /// (`--autosave` writes it back after one).
    pub fn may_change_config(&self) -> bool {
        !self.read_only
    }

    /// The same method, printed by `ctl` with `human`.
    pub const fn with_human(self, human: Human) -> MethodDef {
        MethodDef { human, ..self }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The one-line description docs/rpc-schema.json repeats.
    pub fn summary(&self) -> &'static str {
        self.summary
    }

    pub fn params(&self) -> &'static [Param] {
        self.params
    }

    /// Runs the method.
    pub fn call(&self, api: &Api, params: &Value) -> Result<Value, RpcError> {
        (self.handler)(api, params)
    }

    /// Prints a result of this method as `farflash ctl` shows it.
    pub fn print(&self, out: &mut dyn std::io::Write, result: &Value) -> std::io::Result<()> {
        (self.human)(out, result)
    }
}

/// Every method, group by group, in the order `rpc_methods` lists them. A
/// module that adds methods exposes a `METHODS: &[MethodDef]` slice and is
/// named here once.
pub const GROUPS: &[&[MethodDef]] = &[
    target::INTROSPECTION,
    subsystems::METHODS,
    hosts::METHODS,
    target::METHODS,
    config::METHODS,
    volumes::METHODS,
];

/// Every method, in the order `rpc_methods` lists them.
pub fn all() -> impl Iterator<Item = &'static MethodDef> {
    GROUPS.iter().flat_map(|g| g.iter())
}

/// The method named `name`.
pub fn find(name: &str) -> Option<&'static MethodDef> {
    all().find(|m| m.name == name)
}

/// The names of every method, as `rpc_methods` answers.
pub fn names() -> Vec<&'static str> {
    all().map(|m| m.name).collect()
}

/// Prints `result` of `method` as `farflash ctl` shows it: the method's
/// printer, or a change report for a method this build does not know.
pub fn print_human(
    out: &mut dyn std::io::Write,
    method: &str,
    result: &Value,
) -> std::io::Result<()> {
    match find(method) {
        Some(m) => m.print(out, result),
        None => human::change(out, result),
    }
}

/// What the methods act on.
pub struct Api {
    pub target: Arc<Target>,
    /// Listener changes (None: `listener_add`/`listener_remove` refuse).
    pub listeners: Option<Box<dyn ListenerControl + Send + Sync>>,
    /// Where every change is written back (`farflash serve --autosave`).
    pub autosave: Option<crate::autosave::Autosave>,
}

impl Api {
    pub fn new(target: Arc<Target>) -> Api {
        Api {
            target,
            listeners: None,
            autosave: None,
        }
    }

    /// The listener control, for the methods that change listeners.
    pub fn listener_ctl(&self) -> Result<&dyn ListenerControl, RpcError> {
        match &self.listeners {
            Some(l) => Ok(l.as_ref()),
            None => Err(RpcError::new(
                jsonrpc::FAILED,
                "listeners cannot be changed here",
            )),
        }
    }

    /// Runs one request; after a change, writes the configuration back
    /// when `autosave` is set (a failure to write is logged and reported
    /// as `autosave_error` in the answer: the change itself was made).
    pub fn call(&self, req: &Request) -> Result<Value, RpcError> {
        match find(&req.method) {
            Some(m) => {
                let mut r = m.call(self, &req.params);
                if let (Ok(answer), Some(a)) = (&mut r, &self.autosave) {
                    if m.may_change_config() {
                        if let Err(e) = a.save(&self.target) {
                            tracing::error!(method = m.name, error = %e, "autosave failed");
                            crate::autosave::report(answer, e);
                        }
                    }
                }
                r
            }
            None => Err(RpcError::new(
                jsonrpc::METHOD_NOT_FOUND,
                format!(
                    "no method {:?} (rpc_methods lists them)",
                    req.method.chars().take(64).collect::<String>()
                ),
            )),
        }
    }
}

/// `p` parsed as a method's parameter struct; an error names the field.
pub fn params<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    T::deserialize(p).map_err(|e| RpcError::params(format!("invalid params: {e}")))
}

/// A management error as a JSON-RPC error with its code.
pub fn manage_err(e: ManageError) -> RpcError {
    let code = match &e {
        ManageError::NotFound(_) => jsonrpc::NOT_FOUND,
        ManageError::Exists(_) => jsonrpc::EXISTS,
        ManageError::Conflict(_) => jsonrpc::CONFLICT,
        ManageError::Apply(
            ApplyError::Invalid(ConfigError::Limit(_))
            | ApplyError::Build(BuildError::Descriptors(_)),
        ) => jsonrpc::LIMIT_EXCEEDED,
        ManageError::Apply(ApplyError::Pools(p)) => volumes::code(p),
        ManageError::Invalid(_) | ManageError::Apply(ApplyError::Invalid(_)) => {
            jsonrpc::INVALID_CONFIG
        }
        ManageError::Apply(_) => jsonrpc::FAILED,
    };
    RpcError::new(code, e.to_string())
}

/// A reload report as JSON.
pub fn report_json(r: &ReloadReport) -> Value {
    json!({
        "namespaces_changed": r.changed.iter().map(|(nqn, ids)| json!({"nqn": nqn, "nsids": ids})).collect::<Vec<_>>(),
        "subsystems_added": r.subsystems_added,
        "subsystems_removed": r.subsystems_removed,
        "hosts_changed": r.hosts_changed,
        "qos_changed": r.qos_changed,
        "ana_changed": r.ana_changed,
        "controllers_disconnected": r.disconnected,
        "listeners_added": r.listeners_added.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "listeners_removed": r.listeners_removed.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "ignored": r.ignored,
    })
}

/// A change's result as JSON: its report, or its error.
pub fn report(r: Result<ReloadReport, ManageError>) -> Result<Value, RpcError> {
    r.map(|r| report_json(&r)).map_err(manage_err)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn uuid_str(b: &[u8; 16]) -> String {
    let h = hex(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_autosave;
