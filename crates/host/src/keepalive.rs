//! Keep Alive (Base §5.19, §3.9): a small per-controller thread sends a
//! Keep Alive command on the admin queue every KATO/2, so a controller
//! never tears the association down while a benchmark keeps the I/O
//! queues busy. Callers that prefer driving a timer themselves call
//! [`crate::Controller::keep_alive`] instead.

use crate::admin::AdminQueue;
use crate::cmd;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct KeepAlive {
    stop: mpsc::Sender<()>,
    handle: Option<JoinHandle<()>>,
    failure: Arc<Mutex<Option<String>>>,
}

impl KeepAlive {
    pub fn spawn(admin: Arc<Mutex<AdminQueue>>, period: Duration) -> std::io::Result<KeepAlive> {
        let (stop, rx) = mpsc::channel::<()>();
        let failure = Arc::new(Mutex::new(None));
        let f2 = failure.clone();
        let handle = std::thread::Builder::new()
            .name("nvme-keepalive".into())
            .spawn(move || loop {
                match rx.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => {
                        let r = match admin.lock() {
                            Ok(mut a) => a.run(cmd::keep_alive(), "Keep Alive").map(|_| ()),
                            Err(_) => return,
                        };
                        if let Err(e) = r {
                            if let Ok(mut f) = f2.lock() {
                                *f = Some(e.to_string());
                            }
                            return;
                        }
                    }
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            })?;
        Ok(KeepAlive {
            stop,
            handle: Some(handle),
            failure,
        })
    }

    /// The error that stopped the keep-alive thread, if one did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
