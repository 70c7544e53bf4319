//! The floor under `npm run bench` (DESIGN.md §5 "peers" row): what one full TLS 1.3 handshake
//! and one MiB of TLS records cost on this machine with nothing around them, so the end-to-end
//! CPU per new connection and per MiB can be printed as a multiple of it.
//!
//! - Handshake: Rampart's own server config (`rampart::tls::certs::server_config`, rustls with the
//!   build's provider: aws-lc-rs, or ring with `--features ring`, the same ECDSA P-256 self-signed certificate kind the bench uses, ALPN
//!   `http/1.1`, Rampart's default session cache, ticketer and two TLS 1.3 tickets) against a rustls client
//!   offering only the suite and group OpenSSL clients get from every proxy in the bench
//!   (TLS_AES_256_GCM_SHA384, X25519), both in this one thread, flights passed through `Vec`s:
//!   no sockets, no syscalls. The client checks the server's CertificateVerify signature but not
//!   the chain. Server-side time (the part a proxy pays) is summed around the server's calls only.
//! - Records: 64 KiB of plaintext through the established pair: the server seals it into records
//!   (`writer().write_all` + `write_tls`), the client opens them (`read_tls` + `process_new_packets`
//!   + `reader().read`). Per MiB.
//! - memcpy: the same 64 KiB copied between two buffers (what the copy loop's buffer costs at
//!   least). Per MiB.
//!
//! Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID, so other processes on the shared
//! machine do not count; each reading costs well under 1 µs, about 1 % of the server's share).
//!
//! `cargo bench --bench floor [--features ring] [-- --quick] [--kx X25519MLKEM768] [--resumed]`
//! prints one JSON line (times in µs, medians of batches; `--resumed`: every handshake but the
//! first resumes with a TLS 1.3 ticket):
//! `{ rustls, provider, suite, kx, resumed, key, handshake: { serverUs, clientUs, totalUs, n },
//!    perMiB: { memcpyUs, sealUs, openUs }, batches }`.

use rampart::tls::certs::{load_certified_key, self_signed, server_config};
use rampart::tls::options::base_provider;
use rampart::tls::options::TlsOptions;
use rampart::tls::sessions::Sessions;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, ServerConnection, SignatureScheme,
};
use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

/// Checks the server's TLS 1.3 signature (the client's real per-handshake work) but trusts any
/// chain: the floor is the handshake, not path building.
#[derive(Debug)]
struct SignatureOnly(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for SignatureOnly {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.2 is not offered".into()))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// CPU time of this thread (CLOCK_THREAD_CPUTIME_ID): the machine is shared, so wall time would
/// count other processes' slices.
struct Cpu(Duration);

impl Cpu {
    fn now() -> Cpu {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer for the duration of the call.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Cpu(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
    fn elapsed(&self) -> Duration {
        Cpu::now().0.saturating_sub(self.0)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Pair {
    server: ServerConnection,
    client: ClientConnection,
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (batches, per_batch, rec_iters) = if quick { (5, 40, 200) } else { (9, 100, 1000) };

    let (cert_pem, key_pem) = self_signed(&["localhost".to_string()]).expect("rcgen");
    let ck = load_certified_key(cert_pem.as_bytes(), key_pem.as_bytes()).expect("certified key");
    let opts = TlsOptions::default();
    let server_cfg = server_config(
        ck,
        vec![b"http/1.1".to_vec()],
        None,
        &opts,
        &Sessions::new(&opts, [0; 32], None),
    )
    .expect("server config");

    // `--kx X25519MLKEM768` measures the post-quantum hybrid (aws-lc-rs builds only).
    let kx = std::env::args()
        .skip_while(|a| a != "--kx")
        .nth(1)
        .unwrap_or_else(|| "X25519".into());
    let resumed = std::env::args().any(|a| a == "--resumed");
    let mut provider = base_provider();
    provider
        .cipher_suites
        .retain(|s| s.suite() == rustls::CipherSuite::TLS13_AES_256_GCM_SHA384);
    provider
        .kx_groups
        .retain(|g| format!("{:?}", g.name()) == kx);
    assert_eq!(
        provider.kx_groups.len(),
        1,
        "--kx {kx}: not in this provider"
    );
    let algs = provider.signature_verification_algorithms;
    let mut client_cfg =
        ClientConfig::builder_with_provider(Arc::new(CryptoProvider::clone(&provider)))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SignatureOnly(algs)))
            .with_no_client_auth();
    client_cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Every handshake full: the client never offers a ticket (the bench's noresume shim); with
    // `--resumed` every handshake after the first resumes with the last TLS 1.3 ticket.
    if !resumed {
        client_cfg.resumption = rustls::client::Resumption::disabled();
    }
    let client_cfg = Arc::new(client_cfg);
    let name = ServerName::try_from("localhost").expect("name");

    let mut wire = Vec::with_capacity(1 << 17);
    let mut server_time = Duration::ZERO;
    // One handshake; returns the established pair. `server_time` gets the server's share.
    let handshake = |server_time: &mut Duration, wire: &mut Vec<u8>| -> Pair {
        let mut client = ClientConnection::new(client_cfg.clone(), name.clone()).expect("client");
        let t = Cpu::now();
        let mut server = ServerConnection::new(server_cfg.clone()).expect("server");
        *server_time += t.elapsed();
        while client.is_handshaking() || server.is_handshaking() || server.wants_write() {
            wire.clear();
            while client.wants_write() {
                client.write_tls(wire).expect("client write_tls");
            }
            if !wire.is_empty() {
                let t = Cpu::now();
                let mut rd = &wire[..];
                while !rd.is_empty() {
                    server.read_tls(&mut rd).expect("server read_tls");
                    server.process_new_packets().expect("server process");
                }
                *server_time += t.elapsed();
            }
            wire.clear();
            let t = Cpu::now();
            while server.wants_write() {
                server.write_tls(wire).expect("server write_tls");
            }
            *server_time += t.elapsed();
            if !wire.is_empty() {
                let mut rd = &wire[..];
                while !rd.is_empty() {
                    client.read_tls(&mut rd).expect("client read_tls");
                    client.process_new_packets().expect("client process");
                }
            }
        }
        Pair { server, client }
    };

    // Warm-up (page faults, lazy tables), then batches.
    for _ in 0..per_batch {
        black_box(handshake(&mut server_time, &mut wire));
    }
    let mut hs_server = Vec::new();
    let mut hs_total = Vec::new();
    for _ in 0..batches {
        server_time = Duration::ZERO;
        let t = Cpu::now();
        for _ in 0..per_batch {
            black_box(handshake(&mut server_time, &mut wire));
        }
        hs_total.push(t.elapsed().as_secs_f64() * 1e6 / per_batch as f64);
        hs_server.push(server_time.as_secs_f64() * 1e6 / per_batch as f64);
    }
    let hs_server_us = median(hs_server);
    let hs_total_us = median(hs_total);

    // Records: 64 KiB server → client per iteration.
    const CHUNK: usize = 64 * 1024;
    let plain = vec![b'b'; CHUNK];
    let mut out = vec![0u8; CHUNK];
    let Pair {
        mut server,
        mut client,
    } = handshake(&mut server_time, &mut wire);
    let per_mib = (1 << 20) as f64 / CHUNK as f64;
    let mut seal = Vec::new();
    let mut open = Vec::new();
    for b in 0..=batches {
        let (mut ts, mut to) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..rec_iters {
            wire.clear();
            let t = Cpu::now();
            server.writer().write_all(&plain).expect("write plaintext");
            while server.wants_write() {
                server.write_tls(&mut wire).expect("seal");
            }
            ts += t.elapsed();
            let t = Cpu::now();
            let mut rd = &wire[..];
            let mut got = 0;
            while !rd.is_empty() {
                client.read_tls(&mut rd).expect("client read_tls");
                client.process_new_packets().expect("open");
                loop {
                    match client.reader().read(&mut out[got..]) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("client read: {e}"),
                    }
                    if got == CHUNK {
                        got = 0;
                    }
                }
            }
            to += t.elapsed();
            black_box(&out);
        }
        if b > 0 {
            seal.push(ts.as_secs_f64() * 1e6 / rec_iters as f64 * per_mib);
            open.push(to.as_secs_f64() * 1e6 / rec_iters as f64 * per_mib);
        }
    }

    // memcpy of the same bytes.
    let mut memcpy = Vec::new();
    let src = black_box(plain.clone());
    let mut dst = vec![0u8; CHUNK];
    let iters = rec_iters * 20;
    for b in 0..=batches {
        let t = Cpu::now();
        for _ in 0..iters {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        }
        if b > 0 {
            memcpy.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64 * per_mib);
        }
    }

    println!(
        "{}",
        serde_json::json!({
            "rustls": "0.23",
            "provider": if cfg!(feature = "ring") { "ring" } else { "aws-lc-rs" },
            "suite": "TLS_AES_256_GCM_SHA384",
            "kx": kx,
            "resumed": resumed,
            "key": "ECDSA P-256 (rcgen self-signed, ecdsa_secp256r1_sha256)",
            "handshake": {
                "serverUs": hs_server_us,
                "clientUs": hs_total_us - hs_server_us,
                "totalUs": hs_total_us,
                "n": batches * per_batch,
            },
            "perMiB": {
                "memcpyUs": median(memcpy),
                "sealUs": median(seal),
                "openUs": median(open),
            },
            "batches": batches,
        })
    );
}
