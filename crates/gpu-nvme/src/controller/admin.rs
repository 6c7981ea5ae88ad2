//! The admin queue of a software controller: Identify, Create/Delete I/O SQ/CQ, and
//! Get/Set Features (Number of Queues). Shared by every controller in the workspace.
//!
//! Limitation, reported as NVMe statuses: each I/O CQ serves exactly one I/O SQ (a second SQ
//! on a bound CQ gets "Completion Queue Invalid"), and queues must be physically contiguous.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::memory::{DmaView, RegionKind};
use crate::queue::{CQE_BYTES, ControllerQueue, RingAddrs, SQE_BYTES, validate_depth};
use crate::spec::{AdminOpcode, IdentifyNamespace, Status, SubmissionEntry};

use super::{Controller, ControllerError};

/// Feature identifier of Number of Queues.
const FEATURE_NUMBER_OF_QUEUES: u8 = 0x07;
/// CNS values of Identify.
const CNS_NAMESPACE: u8 = 0x00;
const CNS_CONTROLLER: u8 = 0x01;
const CNS_ACTIVE_NAMESPACES: u8 = 0x02;
/// Largest I/O queue the controllers accept (CAP.MQES + 1).
pub const MAX_IO_QUEUE_DEPTH: u32 = 65_536;

/// The admin queue registers (AQA, ASQ, ACQ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminConfig {
    /// Bus address of the admin SQ.
    pub asq: u64,
    /// Bus address of the admin CQ.
    pub acq: u64,
    /// Entries in each admin ring.
    pub depth: u32,
}

/// A created I/O CQ waiting for its SQ.
#[derive(Debug, Clone, Copy)]
struct PendingCq {
    base: u64,
    depth: u32,
    bound: bool,
}

/// Runs the admin queue of `ctrl` until `stop` is set. Called on the controller's admin thread
/// (the controller rings [`Registers::ring_all`](super::Registers::ring_all) when it stops).
pub fn run_admin_queue(
    ctrl: &dyn Controller,
    config: AdminConfig,
    stop: &AtomicBool,
) -> Result<(), ControllerError> {
    let view = ctrl.dma().view();
    let depth = config.depth;
    validate_depth(depth).map_err(|e| ControllerError::Config(e.to_string()))?;
    let sq = host_ring(&view, config.asq, depth as usize * SQE_BYTES)?;
    let cq = host_ring(&view, config.acq, depth as usize * CQE_BYTES)?;
    let regs = ctrl.registers();
    // SAFETY: both rings were resolved inside registered host memory of the right size, and
    // the doorbells belong to the controller's register file, which outlives this thread.
    let mut admin = unsafe {
        ControllerQueue::new(
            0,
            0,
            RingAddrs {
                sq: sq.cast(),
                sq_depth: depth,
                cq,
                cq_depth: depth,
                sq_doorbell: regs.sq_tail(0)?,
                cq_doorbell: regs.cq_head(0)?,
            },
        )
    };
    let mut state = AdminState {
        cqs: HashMap::new(),
    };
    let mut batch = Vec::new();
    while !stop.load(Ordering::Acquire) {
        batch.clear();
        if admin.fetch(&mut batch, 64) == 0 {
            // The host admin queue rings this bell after each doorbell write (and a stopping
            // controller rings it too), so the thread costs nothing while admin commands are
            // rare, and answers the next one without waiting out a sleep.
            regs.bell(0).sleep(
                || !stop.load(Ordering::Acquire) && admin.pending() == 0,
                super::BELL_SLEEP_LIMIT,
            );
            continue;
        }
        for sqe in &batch {
            let (status, dw0) = state.execute(ctrl, sqe);
            while !admin.post(sqe.cid(), status, dw0) {
                if stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                std::thread::yield_now();
            }
        }
    }
    Ok(())
}

fn host_ring(view: &DmaView<'_>, iova: u64, len: usize) -> Result<*const u8, ControllerError> {
    match view.resolve(iova, len as u64) {
        Some(r) if r.kind == RegionKind::Host && iova.is_multiple_of(4096) => {
            Ok(r.addr as *const u8)
        }
        _ => Err(ControllerError::Config(format!(
            "ring at {iova:#x} is not registered page-aligned host memory"
        ))),
    }
}

struct AdminState {
    cqs: HashMap<u16, PendingCq>,
}

impl AdminState {
    fn execute(&mut self, ctrl: &dyn Controller, sqe: &SubmissionEntry) -> (Status, u32) {
        let Ok(op) = AdminOpcode::try_from(sqe.opcode()) else {
            return (Status::invalid_opcode(), 0);
        };
        match op {
            AdminOpcode::Identify => (identify(ctrl, sqe), 0),
            AdminOpcode::CreateIoCq => self.create_cq(ctrl, sqe),
            AdminOpcode::CreateIoSq => self.create_sq(ctrl, sqe),
            AdminOpcode::DeleteIoSq => self.delete_sq(ctrl, sqe),
            AdminOpcode::DeleteIoCq => self.delete_cq(sqe),
            AdminOpcode::GetFeatures | AdminOpcode::SetFeatures => {
                if (sqe.cdw10 & 0xff) as u8 != FEATURE_NUMBER_OF_QUEUES {
                    return (Status::invalid_field(), 0);
                }
                // Allocated queues are fixed: report them whatever was asked (as SSDs do).
                let n = u32::from(ctrl.registers().max_io_queues()) - 1;
                (Status::SUCCESS, n | (n << 16))
            }
            _ => (Status::invalid_opcode(), 0),
        }
    }

    fn create_cq(&mut self, ctrl: &dyn Controller, sqe: &SubmissionEntry) -> (Status, u32) {
        let qid = (sqe.cdw10 & 0xffff) as u16;
        let depth = (sqe.cdw10 >> 16) + 1;
        let contiguous = sqe.cdw11 & 1 == 1;
        if qid == 0 || qid > ctrl.registers().max_io_queues() || self.cqs.contains_key(&qid) {
            return (Status::invalid_queue_identifier(), 0);
        }
        if validate_depth(depth).is_err() || depth > MAX_IO_QUEUE_DEPTH {
            return (Status::invalid_queue_size(), 0);
        }
        if !contiguous {
            return (Status::invalid_field(), 0);
        }
        if host_ring(&ctrl.dma().view(), sqe.prp1, depth as usize * CQE_BYTES).is_err() {
            return (Status::invalid_field(), 0);
        }
        self.cqs.insert(
            qid,
            PendingCq {
                base: sqe.prp1,
                depth,
                bound: false,
            },
        );
        (Status::SUCCESS, 0)
    }

    fn create_sq(&mut self, ctrl: &dyn Controller, sqe: &SubmissionEntry) -> (Status, u32) {
        let qid = (sqe.cdw10 & 0xffff) as u16;
        let depth = (sqe.cdw10 >> 16) + 1;
        let cqid = (sqe.cdw11 >> 16) as u16;
        if qid == 0 || qid > ctrl.registers().max_io_queues() {
            return (Status::invalid_queue_identifier(), 0);
        }
        if validate_depth(depth).is_err() || depth > MAX_IO_QUEUE_DEPTH {
            return (Status::invalid_queue_size(), 0);
        }
        if sqe.cdw11 & 1 == 0 {
            return (Status::invalid_field(), 0);
        }
        let Some(cq) = self.cqs.get_mut(&cqid) else {
            return (Status::completion_queue_invalid(), 0);
        };
        if cq.bound {
            return (Status::completion_queue_invalid(), 0);
        }
        let view = ctrl.dma().view();
        let (Ok(sq_ptr), Ok(cq_ptr)) = (
            host_ring(&view, sqe.prp1, depth as usize * SQE_BYTES),
            host_ring(&view, cq.base, cq.depth as usize * CQE_BYTES),
        ) else {
            return (Status::invalid_field(), 0);
        };
        let regs = ctrl.registers();
        let (Ok(sq_db), Ok(cq_db)) = (regs.sq_tail(qid), regs.cq_head(cqid)) else {
            return (Status::invalid_queue_identifier(), 0);
        };
        if regs.reset(qid).is_err() {
            return (Status::invalid_queue_identifier(), 0);
        }
        // SAFETY: the rings were resolved inside registered host memory of the right sizes and
        // the doorbells are the controller's own; the host keeps the memory registered until it
        // deletes the queue.
        let queue = unsafe {
            ControllerQueue::new(
                qid,
                cqid,
                RingAddrs {
                    sq: sq_ptr.cast(),
                    sq_depth: depth,
                    cq: cq_ptr,
                    cq_depth: cq.depth,
                    sq_doorbell: sq_db,
                    cq_doorbell: cq_db,
                },
            )
        };
        match ctrl.attach_queue(queue) {
            Ok(()) => {
                cq.bound = true;
                (Status::SUCCESS, 0)
            }
            Err(_) => (Status::invalid_queue_identifier(), 0),
        }
    }

    fn delete_sq(&mut self, ctrl: &dyn Controller, sqe: &SubmissionEntry) -> (Status, u32) {
        let qid = (sqe.cdw10 & 0xffff) as u16;
        if qid == 0 || ctrl.detach_queue(qid).is_err() {
            return (Status::invalid_queue_identifier(), 0);
        }
        // With one SQ per CQ, the CQ of this SQ is free again.
        for cq in self.cqs.values_mut() {
            cq.bound = false;
        }
        (Status::SUCCESS, 0)
    }

    fn delete_cq(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let qid = (sqe.cdw10 & 0xffff) as u16;
        match self.cqs.get(&qid) {
            Some(cq) if cq.bound => (Status::invalid_queue_deletion(), 0),
            Some(_) => {
                self.cqs.remove(&qid);
                (Status::SUCCESS, 0)
            }
            None => (Status::invalid_queue_identifier(), 0),
        }
    }
}

fn identify(ctrl: &dyn Controller, sqe: &SubmissionEntry) -> Status {
    let cns = (sqe.cdw10 & 0xff) as u8;
    let page: Box<[u8; 4096]> = match cns {
        CNS_CONTROLLER => Box::new(ctrl.identify().to_page()),
        CNS_NAMESPACE => match ctrl.namespace(sqe.nsid) {
            Some(geometry) => Box::new(IdentifyNamespace::from_geometry(&geometry).to_page()),
            None => return Status::invalid_namespace(),
        },
        CNS_ACTIVE_NAMESPACES => {
            let mut page = Box::new([0u8; 4096]);
            let mut n = 0;
            for nsid in (sqe.nsid + 1)..=1024 {
                if n == 1024 {
                    break;
                }
                if ctrl.namespace(nsid).is_some() {
                    page[n * 4..n * 4 + 4].copy_from_slice(&nsid.to_le_bytes());
                    n += 1;
                }
            }
            page
        }
        _ => return Status::invalid_field(),
    };
    let mut path = super::data::DataPath::new(ctrl.dma(), None);
    match path
        .segments(sqe, 4096)
        .and_then(|segs| path.copy_to_host_memory(&segs, &page[..]))
    {
        Ok(()) => Status::SUCCESS,
        Err(status) => status,
    }
}
