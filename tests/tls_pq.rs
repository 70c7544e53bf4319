//! The post-quantum hybrid X25519MLKEM768 is offered by default and negotiated with a client that
//! sends it (Chrome and Firefox do; Node 20's OpenSSL 3.0 cannot, so the client here is rustls
//! with aws-lc-rs), over Rampart's own server config, in memory. Also: a `groups` list without
//! it makes the same client fall back to X25519.
#![cfg(not(feature = "ring"))]

use rampart::tls::certs::{load_certified_key, self_signed, server_config};
use rampart::tls::options::TlsOptions;
use rampart::tls::sessions::Sessions;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{aws_lc_rs, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, NamedGroup, ServerConnection,
    SignatureScheme,
};
use std::sync::Arc;

/// Trusts any chain but checks TLS 1.3 signatures: the test is about key exchange.
#[derive(Debug)]
struct AnyChain(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyChain {
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
        Err(rustls::Error::General("TLS 1.3 only".into()))
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(m, c, d, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// The group a default rustls (aws-lc-rs) client negotiates with a server built from `opts`.
fn negotiated(opts: &TlsOptions) -> NamedGroup {
    let (c, k) = self_signed(&["localhost".to_string()]).expect("rcgen");
    let ck = load_certified_key(c.as_bytes(), k.as_bytes()).expect("key");
    let server_cfg =
        server_config(ck, vec![], None, opts, &Sessions::new(opts, [0; 32], None)).expect("config");
    let provider = aws_lc_rs::default_provider();
    assert_eq!(
        provider.kx_groups[0].name(),
        NamedGroup::X25519MLKEM768,
        "the client sends the hybrid key share first, as Chrome does"
    );
    let algs = provider.signature_verification_algorithms;
    let client_cfg = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyChain(algs)))
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(Arc::new(client_cfg), name).expect("client");
    let mut server = ServerConnection::new(server_cfg).expect("server");
    let mut wire = Vec::new();
    for _ in 0..10 {
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
        wire.clear();
        while client.wants_write() {
            client.write_tls(&mut wire).expect("client write");
        }
        let mut rd = &wire[..];
        while !rd.is_empty() {
            server.read_tls(&mut rd).expect("server read");
            server.process_new_packets().expect("server process");
        }
        wire.clear();
        while server.wants_write() {
            server.write_tls(&mut wire).expect("server write");
        }
        let mut rd = &wire[..];
        while !rd.is_empty() {
            client.read_tls(&mut rd).expect("client read");
            client.process_new_packets().expect("client process");
        }
    }
    assert!(!client.is_handshaking() && !server.is_handshaking());
    let s = server
        .negotiated_key_exchange_group()
        .expect("server group");
    let c = client
        .negotiated_key_exchange_group()
        .expect("client group");
    assert_eq!(s.name(), c.name());
    s.name()
}

#[test]
fn x25519mlkem768_is_negotiated_by_default() {
    assert_eq!(
        negotiated(&TlsOptions::default()),
        NamedGroup::X25519MLKEM768
    );
}

#[test]
fn a_groups_list_without_it_falls_back_to_x25519() {
    let opts = TlsOptions {
        groups: Some(vec![
            u16::from(NamedGroup::X25519),
            u16::from(NamedGroup::secp256r1),
        ]),
        ..TlsOptions::default()
    };
    assert_eq!(negotiated(&opts), NamedGroup::X25519);
}
