//! TEMPORARY stand-in until the parser lands (replaced wholesale).
#![allow(missing_docs, dead_code, unused_variables)]
pub const MAX_HELLO_BYTES: usize = 16 * 1024;
pub enum HelloParse {
    Incomplete,
    Complete(ClientHello),
    NotTls(&'static str),
    Malformed(&'static str),
}
pub fn parse_client_hello(buf: &[u8]) -> HelloParse {
    HelloParse::NotTls("stub")
}
pub struct ClientHello {
    pub record_bytes: usize,
    pub sni: Option<String>,
    pub alpn: Vec<Vec<u8>>,
}
impl ClientHello {
    pub fn ja3(&self) -> String {
        String::new()
    }
    pub fn ja4(&self) -> String {
        String::new()
    }
}
