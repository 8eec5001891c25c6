//! What tests (here and in the crates above) build targets with: a
//! [`Provision`] of memory only (RAM and null backends, PTPL files kept in
//! memory), and a queue driven without a transport (connect, run one
//! command, collect completions). Only under `cfg(test)` or the `testing` feature; the
//! control plane's `farflash_control::System` opens real storage.

use crate::command::{Begin, Completion, Xfer};
use crate::config::{BackendKind, Config, NamespaceConfig, SubsystemConfig, TransportConfig};
use crate::resv::ptpl::PtplFile;
use crate::subsystem::{
    build_subsystems as build, human, BuildError, Namespace, Provision, Subsystem,
};
use crate::{NvmeQueue, Target};
use farflash_backend::{open_null, open_ram, open_scripted, Script, SharedBackend};
use farflash_wire::fabrics::{ConnectCmd, ConnectData, PropertyCmd, CNTLID_DYNAMIC};
use farflash_wire::opcode::fctype;
use farflash_wire::sqe::{SglDescriptor, PSDT_SGL};
use farflash_wire::{props, Sqe, Status};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// RAM and null namespaces; any other backend is refused.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory;

impl Provision for Memory {
    fn open_backend(
        &self,
        nqn: &str,
        nc: &NamespaceConfig,
        nsid: u32,
    ) -> Result<(SharedBackend, String), BuildError> {
        let bs = nc.block_size.unwrap_or(512);
        let size = nc.size.map_or(0, |s| s.0);
        let err = |what: &str, cause| BuildError::Backend {
            nqn: nqn.to_owned(),
            nsid,
            what: what.to_owned(),
            cause,
        };
        match nc.backend {
            BackendKind::Ram => Ok((
                open_ram(size, bs).map_err(|e| err("RAM backend", e))?,
                format!("ram {}", human(size)),
            )),
            BackendKind::Null => Ok((
                open_null(size, bs).map_err(|e| err("null backend", e))?,
                format!("null {}", human(size)),
            )),
            other => Err(BuildError::Invalid {
                nqn: nqn.to_owned(),
                nsid,
                msg: format!("{other:?} backend: not in memory (testing::Memory)"),
            }),
        }
    }

    fn ptpl_file(&self, path: &Path) -> Arc<dyn PtplFile> {
        Arc::new(MemPtpl {
            path: path.to_owned(),
            data: Mutex::new(None),
        })
    }
}

/// [`crate::subsystem::build_subsystems`] with [`Memory`].
pub fn build_subsystems(cfg: &Config) -> Result<Vec<Arc<Subsystem>>, BuildError> {
    build(cfg, &Memory)
}

/// A PTPL file in memory.
#[derive(Debug)]
struct MemPtpl {
    path: PathBuf,
    data: Mutex<Option<Vec<u8>>>,
}

impl PtplFile for MemPtpl {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.data.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    fn write(&self, data: &[u8]) -> std::io::Result<()> {
        *self.data.lock().unwrap_or_else(|p| p.into_inner()) = Some(data.to_vec());
        Ok(())
    }
}

pub const NQN: &str = "nqn.2026-11.io.farflash:core-test";
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:core-test";

/// A target whose namespace 1 is a 1 MiB scripted backend (512-byte blocks).
pub fn target() -> (Arc<Target>, Arc<Script>) {
    let transport = TransportConfig::default();
    let cfg = Config {
        listen: vec!["127.0.0.1:4420".into()],
        transport: transport.clone(),
        subsystems: vec![SubsystemConfig::new(
            NQN,
            vec![NamespaceConfig {
                nsid: Some(1),
                block_size: Some(512),
                ..NamespaceConfig::sized(BackendKind::Null, 1 << 20)
            }],
        )],
        pools: Vec::new(),
    };
    let subs = build_subsystems(&cfg).unwrap();
    let old = subs[0].namespace(1).unwrap();
    let (backend, script) = open_scripted(1 << 20, 512);
    subs[0].replace_namespaces(vec![Arc::new(Namespace::with_backend(
        &old, backend, "scripted",
    ))]);
    let addr = "127.0.0.1:4420".parse().unwrap();
    (Target::new(subs, transport, vec![addr]), script)
}

pub fn queue(t: &Arc<Target>) -> NvmeQueue {
    let a = "127.0.0.1:4420".parse().unwrap();
    let p = "127.0.0.1:50000".parse().unwrap();
    NvmeQueue::new(t.clone(), a, p, farflash_wire::discovery::TRTYPE_TCP)
}

pub fn completions(q: &mut NvmeQueue) -> Vec<Completion> {
    let mut v = Vec::new();
    q.take_completions(&mut v);
    v
}

/// Runs one command with `data` as its host data, through every storage
/// step it takes (Compare, Verify and Copy take several); returns its
/// completion.
pub fn run(q: &mut NvmeQueue, sqe: Sqe, data: &[u8]) -> Completion {
    match q.begin(sqe) {
        Begin::Ready { slot, xfer } => {
            if let Xfer::H2C(n) = xfer {
                assert_eq!(n as usize, data.len());
                q.data_buf(slot).copy_from_slice(data);
            }
            q.execute(slot);
        }
        // Refused before any data moved: its completion is queued.
        Begin::Answered => {}
        other => panic!("not runnable: {other:?}"),
    }
    q.commit();
    while q.in_flight() > 0 {
        q.poll_backends();
        // A further step's storage requests go out.
        q.commit();
    }
    let mut c = completions(q);
    assert_eq!(c.len(), 1, "{c:?}");
    c.remove(0)
}

pub fn connect(q: &mut NvmeQueue, qid: u16, cntlid: u16) -> Completion {
    connect_to(q, NQN, HOST, qid, cntlid)
}

/// A Connect (Fabrics §6.3, SQSIZE 31, KATO 5 s) to `subnqn` as `host`.
pub fn connect_to(
    q: &mut NvmeQueue,
    subnqn: &str,
    host: &str,
    qid: u16,
    cntlid: u16,
) -> Completion {
    connect_hostid(q, subnqn, host, [1; 16], qid, cntlid)
}

/// [`connect_to`] with the Connect data's Host Identifier (reservations
/// tell hosts apart by it).
pub fn connect_hostid(
    q: &mut NvmeQueue,
    subnqn: &str,
    host: &str,
    hostid: [u8; 16],
    qid: u16,
    cntlid: u16,
) -> Completion {
    let cmd = ConnectCmd {
        recfmt: 0,
        qid,
        sqsize: 31,
        cattr: 0,
        kato: 5000,
    };
    let d = ConnectData {
        hostid,
        cntlid,
        subnqn: subnqn.into(),
        hostnqn: host.into(),
    };
    let mut data = [0u8; 1024];
    d.encode(&mut data);
    run(q, cmd.to_sqe(1), &data)
}

pub fn rw(opcode: u8, cid: u16, slba: u64, len: u32) -> Sqe {
    Sqe {
        opcode,
        flags: PSDT_SGL,
        cid,
        nsid: 1,
        dptr: SglDescriptor::transport(len),
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: len / 512 - 1,
        ..Sqe::default()
    }
}

/// An enabled controller and one connected I/O queue.
pub fn io_queue(t: &Arc<Target>) -> (NvmeQueue, NvmeQueue) {
    let mut admin = queue(t);
    let c = connect(&mut admin, 0, CNTLID_DYNAMIC);
    assert_eq!(c.status, Status::SUCCESS);
    let connected = admin.take_connected().expect("Connect tells the binding");
    assert_eq!((connected.qid, connected.sqsize), (0, 31));
    let en = PropertyCmd {
        size8: false,
        offset: props::CC,
        value: props::cc::ENABLE_DEFAULT as u64,
    }
    .to_sqe(2, fctype::PROPERTY_SET);
    assert_eq!(run(&mut admin, en, &[]).status, Status::SUCCESS);
    let mut q = queue(t);
    assert_eq!(connect(&mut q, 1, c.result as u16).status, Status::SUCCESS);
    (admin, q)
}
