//! The TCP transport over loopback: the reference server, the pipelining client, the poller and
//! what happens with malformed input, dead servers and stalled servers.

use std::io::{Read, Write};
use std::net::{TcpListener as StdListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::ring::{Consumer, Producer, spsc};
use fabric::frame::{self, Decoded, ErrorCode, HEADER_LEN, Header, Opcode};
use fabric::{
    Connection, Event, Listener, Outbox, Poller, RpcClient, Server, TcpConfig, TcpConnection,
    TcpTransport, Transport, TransportError, serve,
};

const TIMEOUT: Duration = Duration::from_secs(5);
/// A user opcode the test handler implements: replies with the payload reversed.
const REVERSE: Opcode = Opcode(0x10);
/// A user opcode the test handler rejects.
const UNKNOWN: Opcode = Opcode(0x11);

fn small_config() -> TcpConfig {
    TcpConfig {
        max_payload: 1 << 20,
        ..TcpConfig::default()
    }
}

fn start_server(threads: usize) -> (TcpTransport, Server) {
    let transport = TcpTransport::new(small_config());
    let listener = transport.listen("127.0.0.1:0").unwrap();
    let handler = Arc::new(|header: &Header, payload: &[u8], reply: &mut Vec<u8>| {
        if header.opcode == REVERSE {
            reply.extend(payload.iter().rev());
            Ok(())
        } else {
            Err((
                ErrorCode::UNKNOWN_OPCODE,
                format!("no handler for {:?}", header.opcode),
            ))
        }
    });
    let server = serve(&transport, listener, threads, handler).unwrap();
    (transport, server)
}

fn client(transport: &TcpTransport, server: &Server, window: usize) -> RpcClient<TcpConnection> {
    let conn = transport
        .connect(&server.local_addr().to_string(), TIMEOUT)
        .unwrap();
    RpcClient::new(conn, window, TIMEOUT)
}

/// Reads one whole frame from a raw stream: header and payload.
fn read_raw_frame(stream: &mut TcpStream) -> (Header, Vec<u8>) {
    let mut bytes = vec![0; HEADER_LEN];
    stream.read_exact(&mut bytes).unwrap();
    let Decoded::Need(more) = frame::decode(&bytes, u32::MAX).unwrap() else {
        let Decoded::Frame { header, .. } = frame::decode(&bytes, u32::MAX).unwrap() else {
            unreachable!()
        };
        return (header, Vec::new());
    };
    let mut payload = vec![0; more];
    stream.read_exact(&mut payload).unwrap();
    bytes.extend_from_slice(&payload);
    let Decoded::Frame {
        header, payload, ..
    } = frame::decode(&bytes, u32::MAX).unwrap()
    else {
        panic!("frame still incomplete");
    };
    (header, payload.to_vec())
}

fn raw_frame(header: Header, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Header {
        payload_len: payload.len() as u32,
        ..header
    }
    .encode()
    .to_vec();
    bytes.extend_from_slice(payload);
    bytes
}

fn assert_echo_works(rpc: &mut RpcClient<impl Connection>, payload: &[u8]) {
    let reply = rpc.call(Opcode::ECHO, &[payload]).unwrap();
    assert_eq!(reply.payload, payload);
    assert!(reply.header.is_reply());
}

/// A call to a server that does not answer ends with a timeout after the client's 200 ms.
fn assert_times_out(rpc: &mut RpcClient<impl Connection>) {
    let started = Instant::now();
    let error = rpc
        .call(Opcode::ECHO, &[b"anyone?"])
        .expect_err("no reply comes");
    assert!(matches!(error, TransportError::Timeout(_)), "{error}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

fn assert_closed(stream: &mut TcpStream) {
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut rest = Vec::new();
    // Closed means EOF (or a reset); a timeout would mean the server kept the connection.
    match stream.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "unexpected bytes after the error reply"),
        Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
    }
}

#[test]
fn echo_user_opcodes_and_error_replies_travel_through_the_reference_server() {
    let (transport, server) = start_server(2);
    let mut rpc = client(&transport, &server, 1);
    assert_echo_works(&mut rpc, b"hello");
    assert_echo_works(&mut rpc, b"");
    let reply = rpc.call(REVERSE, &[b"ab", b"cd"]).unwrap();
    assert_eq!(reply.payload, b"dcba");
    let Err(TransportError::Remote { code, message }) = rpc.call(UNKNOWN, &[]) else {
        panic!("an unknown opcode must get an error reply");
    };
    assert_eq!(code, ErrorCode::UNKNOWN_OPCODE);
    assert!(message.contains("0x0011"), "{message}");
    let Err(TransportError::Remote { code, .. }) = rpc.call(Opcode(0xFFF0), &[]) else {
        panic!("an unknown transport opcode must get an error reply");
    };
    assert_eq!(code, ErrorCode::UNKNOWN_OPCODE);
    // The connection survives error replies.
    assert_echo_works(&mut rpc, b"still here");
    server.stop().unwrap();
}

#[test]
fn many_pipelined_connections_on_one_communicating_thread_are_all_served() {
    let (transport, server) = start_server(1);
    let workers: Vec<_> = (0..24u64)
        .map(|client_no| {
            let mut rpc = client(&transport, &server, 8);
            thread::spawn(move || {
                let mut next = 0u64;
                let mut answered = 0u64;
                while answered < 200 {
                    while next < 200 && rpc.in_flight() < 8 {
                        let body = (client_no << 32 | next).to_le_bytes();
                        rpc.submit(Opcode::ECHO, &[&body]).unwrap();
                        next += 1;
                    }
                    let reply = rpc.next_reply().unwrap();
                    let value = u64::from_le_bytes(reply.payload.try_into().unwrap());
                    assert_eq!(value >> 32, client_no, "a reply reached the wrong client");
                    // Replies come back in order on one connection; ids start at 1.
                    assert_eq!(value & 0xffff_ffff, answered);
                    assert_eq!(reply.header.request_id, answered + 1);
                    answered += 1;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
}

#[test]
fn frames_written_in_interleaved_fragments_across_connections_are_reassembled() {
    let (_transport, server) = start_server(1);
    let mut streams: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(server.local_addr()).unwrap())
        .collect();
    let frames: Vec<Vec<u8>> = (0..4u64)
        .map(|i| {
            let mut bytes = raw_frame(Header::request(Opcode::ECHO, 100 + i, 0), &[i as u8; 40]);
            bytes.extend(raw_frame(Header::request(REVERSE, 200 + i, 0), b"xyz"));
            bytes
        })
        .collect();
    // Round-robin 7-byte fragments over the four connections, with pauses so they arrive as
    // separate segments and the server sees partial headers and partial payloads.
    for offset in (0..frames[0].len()).step_by(7) {
        for (stream, bytes) in streams.iter_mut().zip(&frames) {
            stream
                .write_all(&bytes[offset..(offset + 7).min(bytes.len())])
                .unwrap();
        }
        thread::sleep(Duration::from_millis(1));
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let (header, payload) = read_raw_frame(stream);
        assert_eq!(
            (header.opcode, header.request_id),
            (Opcode::ECHO, 100 + i as u64)
        );
        assert_eq!(payload, [i as u8; 40]);
        let (header, payload) = read_raw_frame(stream);
        assert_eq!(
            (header.opcode, header.request_id),
            (REVERSE, 200 + i as u64)
        );
        assert_eq!(payload, b"zyx");
    }
}

#[test]
fn a_malformed_frame_gets_an_error_reply_and_a_close_while_other_connections_keep_working() {
    let (transport, server) = start_server(1);
    let mut good = client(&transport, &server, 1);
    assert_echo_works(&mut good, b"before");

    for garbage in [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), {
        // A valid-looking header with one flipped bit: the checksum catches it.
        let mut bytes = raw_frame(Header::request(Opcode::ECHO, 5, 0), b"abc");
        bytes[9] ^= 0x40;
        bytes
    }] {
        let mut bad = TcpStream::connect(server.local_addr()).unwrap();
        bad.write_all(&garbage).unwrap();
        bad.set_read_timeout(Some(TIMEOUT)).unwrap();
        let (header, payload) = read_raw_frame(&mut bad);
        assert_eq!(header.opcode, Opcode::ERROR);
        let (code, message) = frame::decode_error(&payload).unwrap();
        assert_eq!(code, ErrorCode::MALFORMED, "{message}");
        assert_closed(&mut bad);
        assert_echo_works(&mut good, b"after");
    }

    // A frame cut short by the client closing mid-payload harms nobody else either.
    let mut truncated = TcpStream::connect(server.local_addr()).unwrap();
    let bytes = raw_frame(Header::request(Opcode::ECHO, 6, 0), &[7; 100]);
    truncated.write_all(&bytes[..50]).unwrap();
    drop(truncated);
    assert_echo_works(&mut good, b"after truncation");
}

#[test]
fn an_oversize_length_is_rejected_before_its_payload_and_the_connection_closed() {
    let (transport, server) = start_server(1);
    let mut bad = TcpStream::connect(server.local_addr()).unwrap();
    let header = Header::request(Opcode::ECHO, 9, (1 << 20) + 1);
    bad.write_all(&header.encode()).unwrap();
    bad.set_read_timeout(Some(TIMEOUT)).unwrap();
    let (reply, payload) = read_raw_frame(&mut bad);
    assert_eq!(reply.opcode, Opcode::ERROR);
    assert_eq!(
        frame::decode_error(&payload).unwrap().0,
        ErrorCode::OVERSIZE
    );
    assert_closed(&mut bad);

    // The client side refuses to send one, naming the sizes.
    let mut rpc = client(&transport, &server, 1);
    let big = vec![0u8; (1 << 20) + 1];
    let Err(TransportError::PayloadTooLarge { len, max }) = rpc.call(Opcode::ECHO, &[&big]) else {
        panic!("an oversize send must fail");
    };
    assert_eq!((len, max), ((1 << 20) + 1, 1 << 20));
    assert_echo_works(&mut rpc, b"fine");
}

#[test]
fn large_payloads_take_the_vectored_path_and_arrive_intact() {
    let (transport, server) = start_server(2);
    let mut rpc = client(&transport, &server, 4);
    let payload: Vec<u8> = (0..(1 << 20) - 16)
        .map(|i: u32| (i * 7 + i / 251) as u8)
        .collect();
    let (head, tail) = payload.split_at(12345);
    for _ in 0..4 {
        rpc.submit(Opcode::ECHO, &[head, tail]).unwrap();
    }
    for _ in 0..4 {
        assert_eq!(rpc.next_reply().unwrap().payload, &payload[..]);
    }
    let reply = rpc.call(REVERSE, &[&payload]).unwrap();
    assert!(reply.payload.iter().eq(payload.iter().rev()));
}

#[test]
fn connecting_to_a_closed_port_fails_at_once() {
    let port = StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let error = TcpTransport::default()
        .connect(&format!("127.0.0.1:{port}"), TIMEOUT)
        .expect_err("nothing listens there");
    assert!(matches!(error, TransportError::Connect { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// A listener whose accept queue is full: Linux drops further SYNs, so a connect hears nothing
/// back, as from an unreachable host. Returns the listener and the connection filling the queue.
fn listener_that_drops_syns() -> (StdListener, TcpStream) {
    use std::os::fd::AsRawFd;
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: `listen` on a socket this function owns; calling it again only changes the backlog.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let filler = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, filler)
}

#[test]
fn connecting_to_a_server_that_never_answers_fails_within_the_timeout() {
    let (listener, _filler) = listener_that_drops_syns();
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let error = TcpTransport::default()
        .connect(&listener.local_addr().unwrap().to_string(), timeout)
        .expect_err("the SYN is dropped");
    let waited = started.elapsed();
    assert!(
        matches!(&error, TransportError::Connect { source, .. }
        if source.kind() == std::io::ErrorKind::TimedOut),
        "{error}"
    );
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(3),
        "{waited:?}"
    );
}

#[test]
fn an_unresolvable_name_is_an_error_naming_it() {
    let error = TcpTransport::default()
        .connect("no-such-host.invalid:1", TIMEOUT)
        .expect_err("the name does not resolve");
    assert!(
        error.to_string().contains("no-such-host.invalid"),
        "{error}"
    );
}

#[test]
fn a_request_to_a_stalled_server_times_out_instead_of_hanging() {
    // The server accepts and reads, but never answers.
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stalled = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut sink = [0; 256];
        while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    });
    let conn = TcpTransport::default()
        .connect(&addr.to_string(), TIMEOUT)
        .unwrap();
    let mut rpc = RpcClient::new(conn, 1, Duration::from_millis(200));
    assert_times_out(&mut rpc);
    rpc.connection().close().unwrap();
    stalled.join().unwrap();
}

#[test]
fn a_stopped_server_closes_its_clients_connections() {
    let (transport, server) = start_server(2);
    let mut rpc = client(&transport, &server, 1);
    assert_echo_works(&mut rpc, b"x");
    server.stop().unwrap();
    let error = rpc
        .call(Opcode::ECHO, &[b"y"])
        .expect_err("the server is gone");
    assert!(
        matches!(error, TransportError::Closed { .. } | TransportError::Io(_)),
        "unexpected {error}"
    );
}

#[test]
fn replies_produced_on_a_worker_thread_reach_the_right_connection() {
    // RingSched in miniature: the communicating thread forwards requests to a worker through an
    // SPSC ring; the worker pushes replies into another ring and wakes the poller.
    let transport = TcpTransport::new(small_config());
    let listener = transport.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().to_string();
    let mut poller = transport.poller().unwrap();
    let handle = poller.handle();
    let (mut to_worker, mut requests) = spsc::<(fabric::ConnId, u64, Vec<u8>)>(64).unwrap();
    let (mut to_comm, mut replies) = spsc::<(fabric::ConnId, u64, Vec<u8>)>(64).unwrap();
    let worker_handle = handle.clone();
    let worker = thread::spawn(move || {
        let mut served = 0;
        while served < 3 * 20 {
            let Some((conn, id, mut payload)) = requests.pop() else {
                thread::yield_now();
                continue;
            };
            payload.push(b'!');
            to_comm.push_blocking((conn, id, payload)).unwrap();
            worker_handle.wake().unwrap();
            served += 1;
        }
    });
    let clients: Vec<_> = (0..3u8)
        .map(|n| {
            let conn = transport.connect(&addr, TIMEOUT).unwrap();
            thread::spawn(move || {
                let mut rpc = RpcClient::new(conn, 4, TIMEOUT);
                for i in 0..20u8 {
                    let reply = rpc.call(REVERSE, &[&[n, i]]).unwrap();
                    assert_eq!(reply.payload, [n, i, b'!']);
                }
                rpc.connection().close().unwrap();
            })
        })
        .collect();
    for _ in 0..3 {
        handle
            .adopt(listener.accept(Some(TIMEOUT)).unwrap().unwrap())
            .unwrap();
    }
    let mut closed = 0;
    let deadline = Instant::now() + TIMEOUT * 2;
    while closed < 3 && Instant::now() < deadline {
        poller
            .poll(
                Some(Duration::from_millis(100)),
                |_out: &mut dyn Outbox, event| match event {
                    Event::Frame { conn, frame } => {
                        let request = (conn, frame.header.request_id, frame.payload.to_vec());
                        to_worker.push_blocking(request).unwrap();
                    }
                    Event::Closed { error, .. } => {
                        assert!(error.is_none(), "goodbye is a clean close: {error:?}");
                        closed += 1;
                    }
                    Event::Opened(_) => {}
                },
            )
            .unwrap();
        while let Some((conn, id, payload)) = replies.pop() {
            poller
                .send(conn, Header::reply(REVERSE, id, 0), &[&payload])
                .unwrap();
        }
    }
    assert_eq!(closed, 3);
    assert_eq!(poller.connections(), 0);
    for client in clients {
        client.join().unwrap();
    }
    worker.join().unwrap();
}

#[test]
fn a_stale_connection_id_is_refused_after_its_slot_is_reused() {
    let transport = TcpTransport::default();
    let listener = transport.listen("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().to_string();
    let mut poller = transport.poller().unwrap();
    let first = transport.connect(&addr, TIMEOUT).unwrap();
    let old = poller
        .register(listener.accept(Some(TIMEOUT)).unwrap().unwrap())
        .unwrap();
    poller.close(old);
    poller.poll(Some(Duration::ZERO), |_, _| {}).unwrap();
    let _second = transport.connect(&addr, TIMEOUT).unwrap();
    let new = poller
        .register(listener.accept(Some(TIMEOUT)).unwrap().unwrap())
        .unwrap();
    assert_eq!(new.index, old.index, "the slot is reused");
    let error = poller
        .send(old, Header::reply(Opcode::ECHO, 1, 0), &[])
        .unwrap_err();
    assert!(matches!(error, TransportError::UnknownConnection(id) if id == old));
    drop(first);
}

#[test]
fn a_client_that_does_not_read_its_replies_is_paused_without_starving_others() {
    let (transport, server) = start_server(1);
    let mut writer = TcpStream::connect(server.local_addr()).unwrap();
    let mut reader = writer.try_clone().unwrap();
    // 64 echoes of 256 KiB = 16 MiB of replies, far over the 4 MiB the server stages per
    // connection (4 x max_payload) and over what the socket buffers hold.
    let requests = 64u64;
    let body = vec![0x5a; 256 << 10];
    let flood = thread::spawn(move || {
        for id in 0..requests {
            let frame = raw_frame(Header::request(Opcode::ECHO, id, 0), &body);
            writer.write_all(&frame).unwrap();
        }
        writer
    });
    thread::sleep(Duration::from_millis(300));
    // The flooding client is paused, not the communicating thread.
    let mut other = client(&transport, &server, 1);
    assert_echo_works(&mut other, b"not starved");
    reader.set_read_timeout(Some(TIMEOUT)).unwrap();
    for id in 0..requests {
        let (header, payload) = read_raw_frame(&mut reader);
        assert_eq!(header.request_id, id);
        assert_eq!(payload.len(), 256 << 10);
    }
    drop(flood.join().unwrap());
}

#[test]
fn a_peer_close_is_seen_whether_it_comes_with_the_last_request_or_after_its_reply() {
    // The poller stops reading at a short read and counts on the next edge-triggered event:
    // a close arriving with the request, or later on its own, must both reach the handler.
    let transport = TcpTransport::default();
    let listener = transport.listen("127.0.0.1:0").unwrap();
    let mut poller = transport.poller().unwrap();
    for close_with_request in [true, false] {
        let mut raw = TcpStream::connect(listener.local_addr()).unwrap();
        poller
            .register(listener.accept(Some(TIMEOUT)).unwrap().unwrap())
            .unwrap();
        let request = raw_frame(Header::request(Opcode::ECHO, 7, 0), b"last");
        raw.write_all(&request).unwrap();
        if close_with_request {
            raw.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let (mut answered, mut closed) = (false, false);
        let mut serve_until = |poller: &mut fabric::TcpPoller,
                               done: &dyn Fn(bool, bool) -> bool| {
            let deadline = Instant::now() + TIMEOUT;
            while !done(answered, closed) && Instant::now() < deadline {
                poller
                    .poll(Some(Duration::from_millis(10)), |out, event| match event {
                        Event::Frame { conn, frame } => {
                            let header = Header::reply(Opcode::ECHO, frame.header.request_id, 0);
                            out.send(conn, header, &[frame.payload]).unwrap();
                            answered = true;
                        }
                        Event::Closed { .. } => closed = true,
                        Event::Opened(_) => {}
                    })
                    .unwrap();
            }
        };
        serve_until(&mut poller, &|answered, _| answered);
        let (header, payload) = read_raw_frame(&mut raw);
        assert_eq!((header.request_id, payload.as_slice()), (7, &b"last"[..]));
        if !close_with_request {
            raw.shutdown(std::net::Shutdown::Write).unwrap();
        }
        serve_until(&mut poller, &|_, closed| closed);
        assert!(closed, "close with the request: {close_with_request}");
        assert_eq!(poller.connections(), 0);
    }
}

fn polling_config() -> TcpConfig {
    TcpConfig {
        reply_poll: Duration::from_micros(300),
        ..small_config()
    }
}

#[test]
fn a_client_polling_for_its_replies_gets_them_whole() {
    let (_, server) = start_server(1);
    let conn = TcpTransport::new(polling_config())
        .connect(&server.local_addr().to_string(), TIMEOUT)
        .unwrap();
    let mut rpc = RpcClient::new(conn, 4, TIMEOUT);
    for n in 0..200u32 {
        assert_echo_works(&mut rpc, &n.to_le_bytes());
    }
    // A reply larger than a socket buffer arrives in pieces, some after the poll gave up.
    let large: Vec<u8> = (0..512 << 10).map(|i| (i % 251) as u8).collect();
    assert_echo_works(&mut rpc, &large);
}

#[test]
fn a_client_polling_for_its_replies_still_times_out_and_sees_a_close() {
    // The server reads one request and then says nothing: the wait ends at the timeout. It
    // reads a second one and closes: the wait ends with the close.
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        for _ in 0..2 {
            read_raw_frame(&mut stream);
        }
    });
    let conn = TcpTransport::new(polling_config())
        .connect(&addr.to_string(), TIMEOUT)
        .unwrap();
    let mut rpc = RpcClient::new(conn, 2, Duration::from_millis(200));
    assert_times_out(&mut rpc);
    rpc.submit(Opcode::ECHO, &[b"still there?"]).unwrap();
    rpc.flush().unwrap();
    server.join().unwrap();
    let error = rpc.next_reply().expect_err("the server closed");
    assert!(matches!(error, TransportError::Closed { .. }), "{error}");
}

#[test]
fn a_connection_reply_is_sent_before_the_next_ready_connection_is_served() {
    // Two clients' requests are ready in one poll: the first one's reply must be on its way
    // before the second one's request is handled, not staged until the end of the round.
    let transport = TcpTransport::default();
    let listener = transport.listen("127.0.0.1:0").unwrap();
    let mut poller = transport.poller().unwrap();
    let mut clients = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        clients.push(TcpStream::connect(listener.local_addr()).unwrap());
        ids.push(
            poller
                .register(listener.accept(Some(TIMEOUT)).unwrap().unwrap())
                .unwrap(),
        );
    }
    for (k, raw) in clients.iter_mut().enumerate() {
        let request = raw_frame(Header::request(Opcode::ECHO, k as u64, 0), b"ping");
        raw.write_all(&request).unwrap();
        raw.set_nonblocking(true).unwrap();
    }
    // Both requests are in the server's sockets before it polls.
    thread::sleep(Duration::from_millis(50));
    let mut served: Vec<usize> = Vec::new();
    let mut first_reply_was_out = None;
    let deadline = Instant::now() + TIMEOUT;
    while served.len() < 2 && Instant::now() < deadline {
        poller
            .poll(Some(Duration::from_millis(10)), |out, event| {
                let Event::Frame { conn, frame } = event else {
                    return;
                };
                let k = ids.iter().position(|id| *id == conn).unwrap();
                if let Some(&before) = served.first() {
                    let mut byte = [0u8; 1];
                    first_reply_was_out = Some(clients[before].peek(&mut byte).is_ok());
                }
                let header = Header::reply(Opcode::ECHO, frame.header.request_id, 0);
                out.send(conn, header, &[frame.payload]).unwrap();
                served.push(k);
            })
            .unwrap();
    }
    assert_eq!(served.len(), 2);
    assert_eq!(
        first_reply_was_out,
        Some(true),
        "the reply to connection {} waited for connection {}",
        served[0],
        served[1]
    );
    for raw in &mut clients {
        raw.set_nonblocking(false).unwrap();
        let (header, payload) = read_raw_frame(raw);
        assert_eq!(payload, b"ping", "request {}", header.request_id);
    }
}

#[test]
fn an_idle_connection_tells_when_its_peer_closed_without_taking_its_bytes() {
    let transport = TcpTransport::new(small_config());
    let raw = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = raw.local_addr().unwrap().to_string();
    let mut conn = transport.connect(&addr, TIMEOUT).unwrap();
    let (mut peer, _) = raw.accept().unwrap();
    assert!(!conn.peer_closed(), "an open, quiet connection");

    // Bytes waiting are not a close, and the check leaves them for the next receive.
    let header = Header::request(REVERSE, 7, 0);
    peer.write_all(&raw_frame(header, b"still here")).unwrap();
    thread::sleep(Duration::from_millis(20));
    assert!(!conn.peer_closed());
    let frame = conn.recv(TIMEOUT).unwrap();
    assert_eq!(
        (frame.header.request_id, frame.payload),
        (7, &b"still here"[..])
    );

    // The peer goes away (a server killed): the connection says so, at once or soon.
    drop(peer);
    let until = Instant::now() + TIMEOUT;
    while !conn.peer_closed() {
        assert!(Instant::now() < until, "the close was never seen");
        thread::sleep(Duration::from_millis(1));
    }
}
