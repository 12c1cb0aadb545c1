//! What the kernel holds of a loopback TCP connection: the bytes a server's end has received
//! and its process not yet read. A test waits on it (with a deadline) to know that a server
//! has read what was sent before it sends more, so that each piece is a read of its own.
//!
//! Asked of Linux's sock_diag netlink interface by the connection's two addresses: one hash
//! lookup in the kernel. `/proc/net/tcp` (the fallback, where netlink is not there) walks
//! and prints every socket of the machine; on a busy builder that took 10 ms a read.

// socket, send and recv on a netlink socket: std speaks no netlink.
#![allow(unsafe_code)]

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Bytes the server's end of the loopback TCP connection between `server` (the address it
/// listens on) and `client` (the client's own address) has received and not yet read; none
/// if there is no such connection (the server closed it and the kernel let it go) or the
/// addresses are not IPv4.
pub fn unread_by_server(server: SocketAddr, client: SocketAddr) -> Option<u64> {
    let (SocketAddr::V4(server), SocketAddr::V4(client)) = (server, client) else {
        return None;
    };
    match sock_diag(server, client) {
        Ok(found) => found,
        Err(()) => proc_net_tcp(server, client),
    }
}

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h); libc does not name it.
const SOCK_DIAG_BY_FAMILY: u16 = 20;

/// A listening socket's state (linux/tcp_states.h).
const TCP_LISTEN: u8 = 10;

/// One `SOCK_DIAG_BY_FAMILY` request for the socket with these addresses; `Err` if netlink
/// could not be asked (the caller reads `/proc/net/tcp` instead).
fn sock_diag(
    server: std::net::SocketAddrV4,
    client: std::net::SocketAddrV4,
) -> Result<Option<u64>, ()> {
    // SAFETY: a plain system call; its result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(());
    }
    // SAFETY: `fd` is a socket just opened here and owned by nothing else; it is closed once,
    // when `socket` drops.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // struct nlmsghdr (16 bytes), then struct inet_diag_req_v2 (56): family, protocol, ext,
    // pad, states, and the socket's id (ports and addresses in network order, the interface,
    // and no cookie).
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes());
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&[libc::AF_INET as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes());
    req.extend_from_slice(&server.port().to_be_bytes());
    req.extend_from_slice(&client.port().to_be_bytes());
    for ip in [server.ip(), client.ip()] {
        req.extend_from_slice(&ip.octets());
        req.extend_from_slice(&[0; 12]);
    }
    req.extend_from_slice(&0u32.to_ne_bytes());
    req.extend_from_slice(&[0xff; 8]);
    // SAFETY: `req` is a live buffer of `req.len()` bytes for the whole call.
    let sent = unsafe { libc::send(socket.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent != req.len() as isize {
        return Err(());
    }
    let mut reply = [0u8; 1024];
    // SAFETY: `reply` is a live, writable buffer of `reply.len()` bytes for the whole call.
    let got = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            reply.as_mut_ptr().cast(),
            reply.len(),
            0,
        )
    };
    let got = usize::try_from(got).map_err(|_| ())?;
    let reply = &reply[..got];
    let kind = u16::from_ne_bytes(reply.get(4..6).ok_or(())?.try_into().map_err(|_| ())?);
    if kind == libc::NLMSG_ERROR as u16 {
        // struct nlmsgerr: the error (negative errno) after the header. ENOENT: no such socket.
        let errno = i32::from_ne_bytes(reply.get(16..20).ok_or(())?.try_into().map_err(|_| ())?);
        return if errno == -libc::ENOENT {
            Ok(None)
        } else {
            Err(())
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(());
    }
    // struct inet_diag_msg after the header: family, state, timer, retrans (4), the id (48:
    // the ports first), expires (4), then rqueue. With no connection of these addresses the
    // kernel's lookup answers with the listening socket: no such connection either.
    let dport = reply.get(16 + 6..16 + 8).ok_or(())?;
    if reply.get(17) == Some(&TCP_LISTEN) || dport != client.port().to_be_bytes() {
        return Ok(None);
    }
    let rqueue = reply.get(16 + 56..16 + 60).ok_or(())?;
    Ok(Some(u64::from(u32::from_ne_bytes(
        rqueue.try_into().map_err(|_| ())?,
    ))))
}

/// The same from `/proc/net/tcp`: the receive queue of the row with these addresses.
fn proc_net_tcp(server: std::net::SocketAddrV4, client: std::net::SocketAddrV4) -> Option<u64> {
    let hex = |a: std::net::SocketAddrV4| {
        format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(a.ip().octets()),
            a.port()
        )
    };
    let (server, client) = (hex(server), hex(client));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&server.as_str()) && fields.get(2) == Some(&client.as_str()))
            .then(|| {
                let queues = fields.get(4)?;
                u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
            })
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Netlink and `/proc/net/tcp` agree: bytes sent and not read, then read, then the
    /// connection gone.
    #[test]
    fn unread_bytes_are_counted_until_read() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let mut client = std::net::TcpStream::connect(server).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        let from = client.local_addr().unwrap();
        let (SocketAddr::V4(s), SocketAddr::V4(c)) = (server, from) else {
            unreachable!("bound to 127.0.0.1")
        };
        assert_eq!(unread_by_server(server, from), Some(0));
        client.write_all(b"hello").unwrap();
        // Loopback delivers within the write; the deadline is for a machine under load.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while unread_by_server(server, from) != Some(5) {
            assert!(std::time::Instant::now() < deadline, "5 bytes never queued");
            std::thread::yield_now();
        }
        assert_eq!(sock_diag(s, c), Ok(Some(5)));
        assert_eq!(proc_net_tcp(s, c), Some(5));
        let mut got = [0u8; 5];
        accepted.read_exact(&mut got).unwrap();
        assert_eq!(unread_by_server(server, from), Some(0));
        // No such connection: a port nothing uses.
        let other = SocketAddr::from(([127, 0, 0, 1], from.port().wrapping_add(1).max(1)));
        assert_eq!(unread_by_server(server, other), None);
    }
}
