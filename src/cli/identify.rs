//! `farflash identify`: Identify Controller (and with --nsid Identify
//! Namespace plus its CNS 03h descriptors) of a remote subsystem, printed
//! like `nvme id-ctrl` / `nvme id-ns`.

use super::discover::{FabricsArgs, OutputFormat, IO_PORT};
use anyhow::Context;
use farflash_host::Controller;
use farflash_wire::identify::{nidt, IdCtrl};
use farflash_wire::le::{u16_at, u64_at};
use serde_json::{json, Map, Value};

#[derive(clap::Args, Debug, Default)]
pub struct IdentifyArgs {
    #[command(flatten)]
    pub fabrics: FabricsArgs,
    /// Subsystem NQN.
    #[arg(short = 'n', long = "nqn")]
    pub nqn: String,
    /// Also identify this namespace.
    #[arg(long = "nsid")]
    pub nsid: Option<u32>,
    /// Output format.
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value = "normal"
    )]
    pub output_format: OutputFormat,
}

pub fn run(args: IdentifyArgs) -> anyhow::Result<()> {
    let opts = args.fabrics.options(&args.nqn, IO_PORT)?;
    let ctrl = Controller::connect_with_queues(&opts, 0)
        .with_context(|| format!("connecting to {}", opts.describe()))?;
    let ctrl_page = ctrl.identify(farflash_wire::opcode::cns::CONTROLLER, 0)?;
    let ns = match args.nsid {
        Some(nsid) => {
            let page = ctrl
                .identify(farflash_wire::opcode::cns::NAMESPACE, nsid)
                .with_context(|| format!("Identify Namespace {nsid}"))?;
            // CNS 03h is optional before NVMe 1.3: a failure only loses the UUID.
            let desc = ctrl.ns_descriptors(nsid).unwrap_or_default();
            Some((nsid, page, desc))
        }
        None => None,
    };
    ctrl.shutdown().context("disconnecting")?;
    let id = IdCtrl::decode(&ctrl_page);
    let cfields = ctrl_fields(&id, &ctrl_page);
    let nfields = ns.as_ref().map(|(_, p, d)| ns_fields(p, d));
    match args.output_format {
        OutputFormat::Normal => {
            println!("NVME Identify Controller:");
            print_fields(&cfields, 10);
            if let (Some((nsid, ..)), Some(f)) = (&ns, &nfields) {
                println!("NVME Identify Namespace {nsid}:");
                print_fields(f, 8);
            }
        }
        OutputFormat::Json => {
            let v = match nfields {
                None => to_json(&cfields),
                Some(n) => json!({ "controller": to_json(&cfields), "namespace": to_json(&n) }),
            };
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
    }
    Ok(())
}

/// A named field: text for the normal output, a value for JSON.
struct Field {
    name: String,
    text: String,
    json: Value,
}

fn num(name: &str, v: u64, hex: bool) -> Field {
    Field {
        name: name.into(),
        text: if hex {
            format!("{v:#x}")
        } else {
            v.to_string()
        },
        json: json!(v),
    }
}
fn text(name: &str, v: &str) -> Field {
    Field {
        name: name.into(),
        text: v.into(),
        json: json!(v),
    }
}
fn hexstr(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn ctrl_fields(id: &IdCtrl, page: &[u8]) -> Vec<Field> {
    let ieee = format!("{:02x}{:02x}{:02x}", page[75], page[74], page[73]);
    vec![
        num("vid", id.vid as u64, true),
        num("ssvid", id.ssvid as u64, true),
        text("sn", &id.sn),
        text("mn", &id.mn),
        text("fr", &id.fr),
        num("rab", id.rab as u64, false),
        text("ieee", &ieee),
        num("cmic", id.cmic as u64, true),
        num("mdts", id.mdts as u64, false),
        num("cntlid", id.cntlid as u64, true),
        num("ver", id.ver as u64, true),
        num("oaes", id.oaes as u64, true),
        num("ctratt", id.ctratt as u64, true),
        num("cntrltype", id.cntrltype as u64, false),
        num("oacs", id.oacs as u64, true),
        num("acl", id.acl as u64, false),
        num("aerl", id.aerl as u64, false),
        num("frmw", id.frmw as u64, true),
        num("lpa", id.lpa as u64, true),
        num("elpe", id.elpe as u64, false),
        num("kas", id.kas as u64, false),
        num("sqes", id.sqes as u64, true),
        num("cqes", id.cqes as u64, true),
        num("maxcmd", id.maxcmd as u64, false),
        num("nn", id.nn as u64, false),
        num("oncs", id.oncs as u64, true),
        num("fuses", u16_at(page, 522) as u64, true),
        num("vwc", id.vwc as u64, true),
        num("sgls", id.sgls as u64, true),
        text("subnqn", &id.subnqn),
        num("ioccsz", id.ioccsz as u64, false),
        num("iorcsz", id.iorcsz as u64, false),
        num("icdoff", id.icdoff as u64, false),
        num("fcatt", id.fcatt as u64, true),
        num("msdbd", id.msdbd as u64, false),
    ]
}

fn ns_fields(page: &[u8], desc: &[(u8, Vec<u8>)]) -> Vec<Field> {
    let nlbaf = page[25];
    let flbas = page[26];
    let mut f = vec![
        num("nsze", u64_at(page, 0), true),
        num("ncap", u64_at(page, 8), true),
        num("nuse", u64_at(page, 16), true),
        num("nsfeat", page[24] as u64, true),
        num("nlbaf", nlbaf as u64, false),
        num("flbas", flbas as u64, true),
        num("nmic", page[30] as u64, true),
        num("dlfeat", page[33] as u64, false),
        text("nguid", &hexstr(&page[104..120])),
        text("eui64", &hexstr(&page[120..128])),
    ];
    if let Some((_, u)) = desc.iter().find(|(t, v)| *t == nidt::UUID && v.len() == 16) {
        let mut b = [0u8; 16];
        b.copy_from_slice(u);
        f.push(text("uuid", &farflash_host::options::uuid_string(&b)));
    }
    let in_use = (flbas & 0xF) as usize;
    let mut lbafs = vec![];
    for i in 0..=(nlbaf as usize).min(63) {
        let off = 128 + i * 4;
        let (ms, lbads, rp) = (u16_at(page, off), page[off + 2], page[off + 3] & 3);
        let use_mark = if i == in_use { " (in use)" } else { "" };
        f.push(Field {
            name: format!("lbaf {i:2}"),
            text: format!("ms:{ms:<3} lbads:{lbads:<2} rp:{rp}{use_mark}"),
            json: Value::Null,
        });
        lbafs.push(json!({ "ms": ms, "ds": lbads, "rp": rp }));
    }
    f.push(Field {
        name: "lbafs".into(),
        text: String::new(),
        json: Value::Array(lbafs),
    });
    f
}

fn print_fields(f: &[Field], width: usize) {
    for x in f.iter().filter(|x| !x.json.is_array()) {
        println!("{:<width$}: {}", x.name, x.text);
    }
}

fn to_json(f: &[Field]) -> Value {
    let mut m = Map::new();
    for x in f.iter().filter(|x| !x.json.is_null()) {
        m.insert(x.name.clone(), x.json.clone());
    }
    Value::Object(m)
}
