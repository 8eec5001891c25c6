//! JSON-RPC 2.0 framing (https://www.jsonrpc.org/specification): one
//! request, or a batch, per line; a response per request that has an id.
//! Pure functions of bytes: the fuzz target `rpc_request` drives them.

use serde_json::{json, Map, Value};
use zeroize::Zeroize;

/// Largest request line accepted (bytes, newline excluded).
pub const MAX_REQUEST: usize = 1 << 20;
/// Most requests in one batch.
pub const MAX_BATCH: usize = 64;

// JSON-RPC 2.0 §5.1 error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
// Server errors (-32000..-32099): farflash's own.
/// The object named does not exist.
pub const NOT_FOUND: i64 = -32001;
/// The object to create exists already.
pub const EXISTS: i64 = -32002;
/// The change would make an invalid configuration.
pub const INVALID_CONFIG: i64 = -32003;
/// A backend, a listener or a file could not be opened or written.
pub const FAILED: i64 = -32004;
/// A limit would be exceeded (`[transport.limits]` max_subsystems,
/// max_namespaces_per_subsystem, max_namespaces; RLIMIT_NOFILE for files).
pub const LIMIT_EXCEEDED: i64 = -32005;
/// The object is in use (a pool holding volumes, a volume exported or
/// with clones).
pub const IN_USE: i64 = -32006;
/// The pool has no room for the change.
pub const NO_SPACE: i64 = -32007;
/// The object exists with other settings than asked (an allowed host's
/// `read_only` grant); the message names the field. Unlike `EXISTS`, a
/// repeated call is not a success.
pub const CONFLICT: i64 = -32008;

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }
    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// One well-formed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// None: a notification (no response).
    pub id: Option<Value>,
    pub method: String,
    /// An object (named) or an array (positional); absent is an empty object.
    pub params: Value,
}

/// What a line held.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    One(Result<Request, (Value, RpcError)>),
    Batch(Vec<Result<Request, (Value, RpcError)>>),
    /// Unparsable or empty batch: answered with this error (id null).
    Broken(RpcError),
}

/// Overwrites every string in `v`, at any depth, before it is dropped: a
/// request's params may carry secrets (DH-HMAC-CHAP keys, TLS PSKs, a
/// configuration's text), which must not stay behind in freed memory.
pub fn scrub(v: &mut Value) {
    match v {
        Value::String(s) => s.zeroize(),
        Value::Array(a) => a.iter_mut().for_each(scrub),
        Value::Object(o) => o.values_mut().for_each(scrub),
        _ => {}
    }
}

/// Checks one request object (§4); whatever it does not keep is scrubbed.
fn request(mut v: Value) -> Result<Request, (Value, RpcError)> {
    let Value::Object(o) = &mut v else {
        scrub(&mut v);
        return Err((
            Value::Null,
            RpcError::new(INVALID_REQUEST, "a request is an object"),
        ));
    };
    let r = request_members(o);
    scrub(&mut v);
    r
}

/// Takes a request's members out of `o` (what is left is scrubbed by the
/// caller).
fn request_members(o: &mut Map<String, Value>) -> Result<Request, (Value, RpcError)> {
    let id = o.remove("id");
    let id_for_err = match &id {
        Some(v @ (Value::String(_) | Value::Number(_) | Value::Null)) => v.clone(),
        _ => Value::Null,
    };
    let bad = |m: &str| Err((id_for_err.clone(), RpcError::new(INVALID_REQUEST, m)));
    if o.remove("jsonrpc") != Some(Value::String("2.0".into())) {
        return bad("\"jsonrpc\" must be \"2.0\"");
    }
    if let Some(i) = &id {
        if !matches!(i, Value::String(_) | Value::Number(_) | Value::Null) {
            return bad("\"id\" must be a string, a number or null");
        }
    }
    let method = match o.remove("method") {
        Some(Value::String(m)) => m,
        _ => return bad("\"method\" must be a string"),
    };
    let mut params = match o.remove("params") {
        None => Value::Object(Map::new()),
        Some(p @ (Value::Object(_) | Value::Array(_))) => p,
        Some(mut p) => {
            scrub(&mut p);
            return bad("\"params\" must be an object or an array");
        }
    };
    if let Some(k) = o.keys().next() {
        scrub(&mut params);
        return bad(&format!("unknown member {k:?}"));
    }
    Ok(Request { id, method, params })
}

/// Parses one line (without its newline).
pub fn parse(line: &[u8]) -> Incoming {
    if line.len() > MAX_REQUEST {
        return Incoming::Broken(RpcError::new(INVALID_REQUEST, "request too large"));
    }
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Incoming::Broken(RpcError::new(PARSE_ERROR, format!("parse error: {e}"))),
    };
    match v {
        Value::Array(items) => {
            if items.is_empty() {
                return Incoming::Broken(RpcError::new(INVALID_REQUEST, "empty batch"));
            }
            if items.len() > MAX_BATCH {
                return Incoming::Broken(RpcError::new(
                    INVALID_REQUEST,
                    format!("a batch holds at most {MAX_BATCH} requests"),
                ));
            }
            Incoming::Batch(items.into_iter().map(request).collect())
        }
        v => Incoming::One(request(v)),
    }
}

pub fn success(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn failure(id: Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
}

/// Answers one line with `call` running each request; `None` when nothing
/// is to be sent (notifications only).
pub fn handle_line(
    line: &[u8],
    mut call: impl FnMut(&Request) -> Result<Value, RpcError>,
) -> Option<Value> {
    let mut one = |r: Result<Request, (Value, RpcError)>| -> Option<Value> {
        match r {
            Ok(mut req) => {
                let out = call(&req);
                scrub(&mut req.params);
                let id = req.id?;
                Some(match out {
                    Ok(v) => success(id, v),
                    Err(e) => failure(id, &e),
                })
            }
            Err((id, e)) => Some(failure(id, &e)),
        }
    };
    match parse(line) {
        Incoming::Broken(e) => Some(failure(Value::Null, &e)),
        Incoming::One(r) => one(r),
        Incoming::Batch(rs) => {
            let out: Vec<Value> = rs.into_iter().filter_map(one).collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_overwrites_every_string_at_any_depth() {
        let mut v = json!({
            "nqn": "nqn.x",
            "psk": "NVMeTLSkey-1:01:secret:",
            "hosts": [{"dhchap_key": "DHHC-1:00:secret:"}, 7, null, ["a", {"b": "c"}]]
        });
        scrub(&mut v);
        assert_eq!(
            v,
            json!({"nqn": "", "psk": "", "hosts": [{"dhchap_key": ""}, 7, null, ["", {"b": ""}]]})
        );
    }

    fn answer(line: &str) -> Option<Value> {
        handle_line(line.as_bytes(), |r| match r.method.as_str() {
            "echo" => Ok(r.params.clone()),
            m => Err(RpcError::new(METHOD_NOT_FOUND, format!("no method {m}"))),
        })
    }

    #[test]
    fn requests_and_errors_follow_the_specification() {
        let a = answer(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#).unwrap();
        assert_eq!(a, json!({"jsonrpc":"2.0","id":1,"result":{"a":1}}));
        let code = |l: &str| answer(l).unwrap()["error"]["code"].as_i64();
        assert_eq!(code("{"), Some(PARSE_ERROR));
        assert_eq!(code("[]"), Some(INVALID_REQUEST));
        assert_eq!(code("7"), Some(INVALID_REQUEST));
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"echo"}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":5}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"echo"}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":3}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"echo","x":3}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":"a","method":"nope"}"#),
            Some(METHOD_NOT_FOUND)
        );
        // A notification gets no answer; a batch answers each request with an id.
        assert_eq!(answer(r#"{"jsonrpc":"2.0","method":"echo"}"#), None);
        let b = answer(
            r#"[{"jsonrpc":"2.0","id":1,"method":"echo"},{"jsonrpc":"2.0","method":"echo"},5]"#,
        )
        .unwrap();
        assert_eq!(b.as_array().map(Vec::len), Some(2));
        let big = format!("[{}]", vec!["1"; MAX_BATCH + 1].join(","));
        assert_eq!(code(&big), Some(INVALID_REQUEST));
        let huge = vec![b' '; MAX_REQUEST + 1];
        assert!(handle_line(&huge, |_| Ok(Value::Null)).is_some());
    }
}
