//! The nfnetlink socket: opened inside the proxier's network namespace (a socket keeps the
//! namespace it was created in, so only the creating thread has to enter it), one batch sent
//! per transaction, the kernel's errors read back.
//!
//! nfnetlink processes a batch while `send` runs (the kernel handles a netlink message in the
//! sender's context), so when `send` returns every error is already queued on the socket;
//! messages carry no `NLM_F_ACK` (160,000 acknowledgements of a full sync would overflow the
//! receive buffer) and the replies are drained without blocking. A batch with any error is
//! aborted as a whole.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{netlink, AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use super::message::Sent;
use super::NetlinkError;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// The send buffer a batch needs beyond its size; larger batches than the default buffer
/// (~200 KiB) raise it (`SO_SNDBUFFORCE`, root only; `SO_SNDBUF` is capped by wmem_max).
const SLACK: usize = 64 * 1024;

pub struct Socket {
    fd: OwnedFd,
    /// Sequence number of the next batch's first message.
    seq: u32,
    sndbuf: usize,
}

fn netns_error(netns: &str) -> impl Fn(io::Error) -> NetlinkError + '_ {
    move |source| NetlinkError::Socket {
        netns: netns.to_string(),
        source,
    }
}

impl Socket {
    /// A socket in /run/netns/NAME (created by a thread that enters it and ends), or in this
    /// process's namespace.
    pub fn open(netns: Option<&str>) -> Result<Socket, NetlinkError> {
        let fd = match netns {
            None => create().map_err(netns_error("(own)"))?,
            Some(ns) => {
                let f = File::open(format!("/run/netns/{ns}")).map_err(netns_error(ns))?;
                let t = std::thread::Builder::new()
                    .name("nft-netlink-open".into())
                    .spawn(move || -> io::Result<OwnedFd> {
                        rustix::thread::move_into_link_name_space(
                            f.as_fd(),
                            Some(rustix::thread::LinkNameSpaceType::Network),
                        )?;
                        create()
                    })
                    .map_err(netns_error(ns))?;
                t.join()
                    .map_err(|_| netns_error(ns)(io::Error::other("socket thread panicked")))?
                    .map_err(netns_error(ns))?
            }
        };
        Ok(Socket {
            fd,
            seq: rand::random::<u32>() | 1,
            sndbuf: 0,
        })
    }

    /// The sequence number the next batch starts at.
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Sends one batch and returns the kernel's first error, if any (the batch then changed
    /// nothing).
    pub fn transact(&mut self, batch: &Sent<'_>) -> Result<(), NetlinkError> {
        self.seq = batch.first_seq.wrapping_add(batch.what.len() as u32 + 1);
        // Replies of an earlier batch that failed half-read are of no interest.
        self.drain(batch, false)?;
        let need = batch.bytes.len() + SLACK;
        if need > self.sndbuf && need > 200 * 1024 {
            rustix::net::sockopt::set_socket_send_buffer_size_force(&self.fd, need)
                .or_else(|_| rustix::net::sockopt::set_socket_send_buffer_size(&self.fd, need))
                .map_err(io::Error::from)?;
            self.sndbuf = need;
        }
        let n = rustix::net::send(&self.fd, &batch.bytes, SendFlags::empty())
            .map_err(io::Error::from)?;
        if n != batch.bytes.len() {
            return Err(NetlinkError::Io(io::Error::other(format!(
                "netlink sent {n} of {} bytes",
                batch.bytes.len()
            ))));
        }
        self.drain(batch, true)
    }

    /// Sends one request with `NLM_F_DUMP` (built by `build` with the sequence number to use)
    /// and hands each reply message (header included) to `each`, until the dump ends.
    pub fn dump(
        &mut self,
        build: impl FnOnce(u32) -> Vec<u8>,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), NetlinkError> {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        let req = build(seq);
        rustix::net::sockopt::set_socket_timeout(
            &self.fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(std::time::Duration::from_secs(10)),
        )
        .map_err(io::Error::from)?;
        rustix::net::send(&self.fd, &req, SendFlags::empty()).map_err(io::Error::from)?;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::empty()) {
                Ok((_, n)) => n.min(buf.len()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(NetlinkError::Io(e.into())),
            };
            let mut off = 0;
            while off + 16 <= n {
                let h = &buf[off..n];
                let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let ty = u16::from_ne_bytes([h[4], h[5]]);
                let mseq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
                if len < 16 || len > h.len() {
                    break;
                }
                off += (len + 3) & !3;
                if mseq != seq {
                    continue; // a late reply to something else
                }
                match ty {
                    NLMSG_DONE => return Ok(()),
                    NLMSG_ERROR if len >= 20 => {
                        let errno = i32::from_ne_bytes([h[16], h[17], h[18], h[19]]);
                        if errno != 0 {
                            return Err(NetlinkError::Rejected {
                                what: "a listing".into(),
                                source: io::Error::from_raw_os_error(-errno),
                            });
                        }
                        return Ok(());
                    }
                    _ => each(&h[..len]),
                }
            }
        }
    }

    /// Reads queued replies without blocking; with `report`, the first error of `batch`.
    fn drain(&self, batch: &Sent<'_>, report: bool) -> Result<(), NetlinkError> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut first: Option<NetlinkError> = None;
        loop {
            let n = match rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::DONTWAIT) {
                Ok((_, n)) => n.min(buf.len()),
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) if report => {
                    // ENOBUFS: replies were lost, which only errors produce: the batch failed.
                    return Err(first.unwrap_or(NetlinkError::Io(e.into())));
                }
                Err(_) => break,
            };
            if !report {
                continue;
            }
            let mut off = 0;
            while off + 16 <= n {
                let h = &buf[off..n];
                let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let ty = u16::from_ne_bytes([h[4], h[5]]);
                let seq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
                if len < 16 || len > h.len() {
                    break;
                }
                if ty == NLMSG_ERROR && len >= 20 {
                    let errno = i32::from_ne_bytes([h[16], h[17], h[18], h[19]]);
                    if errno != 0 && first.is_none() {
                        first = Some(NetlinkError::Rejected {
                            what: batch.describe(seq),
                            source: io::Error::from_raw_os_error(-errno),
                        });
                    }
                }
                off += (len + 3) & !3;
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn create() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(netlink::NETFILTER),
    )?)
}
