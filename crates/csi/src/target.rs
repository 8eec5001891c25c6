//! The targets, as the controller reaches them: JSON-RPC over each one's
//! mutual-TLS management endpoint (`farflash_mgmt::net`), and what their
//! errors mean to Kubernetes (a gRPC status whose message names the target
//! and what failed).

use crate::config::ControllerConfig;
use farflash_mgmt::jsonrpc as rpc;
use farflash_mgmt::net::NetClient;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Code, Status};

/// A target's answer that is an error, or no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("target {target}: {method}: {message} (error {code})")]
    Rpc {
        target: String,
        method: String,
        code: i64,
        message: String,
    },
    #[error("target {target}: {method}: {message}")]
    Unreachable {
        target: String,
        method: String,
        message: String,
    },
}

impl CallError {
    /// The JSON-RPC error code, if the target answered with one.
    pub fn code(&self) -> Option<i64> {
        match self {
            CallError::Rpc { code, .. } => Some(*code),
            CallError::Unreachable { .. } => None,
        }
    }
    pub fn is(&self, code: i64) -> bool {
        self.code() == Some(code)
    }
}

/// The gRPC status Kubernetes gets for a target's error.
impl From<CallError> for Status {
    fn from(e: CallError) -> Status {
        let code = match e.code() {
            None => Code::Unavailable,
            Some(rpc::NOT_FOUND) => Code::NotFound,
            // CONFLICT: exists with other settings (a node published with
            // another readonly): the CSI spec's ALREADY_EXISTS for an
            // incompatible ControllerPublishVolume.
            Some(rpc::EXISTS | rpc::CONFLICT) => Code::AlreadyExists,
            Some(rpc::INVALID_CONFIG | rpc::INVALID_PARAMS) => Code::InvalidArgument,
            Some(rpc::LIMIT_EXCEEDED | rpc::NO_SPACE) => Code::ResourceExhausted,
            Some(rpc::IN_USE) => Code::FailedPrecondition,
            // A target without the volume API (older than the driver).
            Some(rpc::METHOD_NOT_FOUND) => Code::FailedPrecondition,
            Some(_) => Code::Internal,
        };
        let mut msg = e.to_string();
        if e.is(rpc::METHOD_NOT_FOUND) {
            msg.push_str(": the target has no such method (a farflash older than this driver?)");
        }
        Status::new(code, msg)
    }
}

/// Calls into the configured targets; cheap to clone.
#[derive(Clone)]
pub struct Targets {
    clients: Arc<HashMap<String, NetClient>>,
}

impl Targets {
    /// Clients for every target of `config` (its TLS files read now).
    pub fn new(config: &ControllerConfig) -> std::io::Result<Targets> {
        let tls = config.tls_files().client_config()?;
        let mut clients = HashMap::new();
        for t in config.targets() {
            let c = NetClient::new(t.management(), t.server_name(), tls.clone())?;
            clients.insert(t.name().to_owned(), c);
        }
        Ok(Targets {
            clients: Arc::new(clients),
        })
    }

    /// One call, blocking (run it off the async runtime's threads).
    pub fn call(&self, target: &str, method: &str, params: Value) -> Result<Value, CallError> {
        let unreachable = |message: String| CallError::Unreachable {
            target: target.to_owned(),
            method: method.to_owned(),
            message,
        };
        let client = self
            .clients
            .get(target)
            .ok_or_else(|| unreachable("not in the controller's configuration".into()))?;
        let answer = client
            .call(method, params)
            .map_err(|e| unreachable(e.to_string()))?;
        if let Some(e) = answer.get("error") {
            return Err(CallError::Rpc {
                target: target.to_owned(),
                method: method.to_owned(),
                code: e["code"].as_i64().unwrap_or(rpc::INTERNAL_ERROR),
                message: e["message"].as_str().unwrap_or("(no message)").to_owned(),
            });
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpc_err(code: i64) -> CallError {
        CallError::Rpc {
            target: "target-a".into(),
            method: "volume_create".into(),
            code,
            message: "pool fast: no room".into(),
        }
    }

    #[test]
    fn target_errors_become_codes_kubernetes_understands() {
        let cases = [
            (rpc::NOT_FOUND, Code::NotFound),
            (rpc::EXISTS, Code::AlreadyExists),
            (rpc::CONFLICT, Code::AlreadyExists),
            (rpc::INVALID_CONFIG, Code::InvalidArgument),
            (rpc::INVALID_PARAMS, Code::InvalidArgument),
            (rpc::LIMIT_EXCEEDED, Code::ResourceExhausted),
            (rpc::NO_SPACE, Code::ResourceExhausted),
            (rpc::IN_USE, Code::FailedPrecondition),
            (rpc::METHOD_NOT_FOUND, Code::FailedPrecondition),
            (rpc::FAILED, Code::Internal),
        ];
        for (rpc_code, want) in cases {
            let s = Status::from(rpc_err(rpc_code));
            assert_eq!(s.code(), want, "{rpc_code}");
            assert!(
                s.message()
                    .contains("target target-a: volume_create: pool fast: no room"),
                "{}",
                s.message()
            );
        }
        let s = Status::from(rpc_err(rpc::METHOD_NOT_FOUND));
        assert!(s.message().contains("no such method"), "{}", s.message());
        let down = CallError::Unreachable {
            target: "target-b".into(),
            method: "volume_get".into(),
            message: "management endpoint 10.0.0.6:4430: connection refused".into(),
        };
        let s = Status::from(down);
        assert_eq!(s.code(), Code::Unavailable);
        assert!(
            s.message().contains("target target-b") && s.message().contains("connection refused")
        );
    }
}
