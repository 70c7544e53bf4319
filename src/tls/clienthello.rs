//! TEMPORARY stand-in until the parser lands (replaced wholesale): SNI/ALPN only.
#![allow(missing_docs, dead_code, unused_variables)]
pub const MAX_HELLO_BYTES: usize = 16 * 1024;
pub enum HelloParse {
    Incomplete,
    Complete(ClientHello),
    NotTls(&'static str),
    Malformed(&'static str),
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
pub fn parse_client_hello(buf: &[u8]) -> HelloParse {
    if buf.is_empty() {
        return HelloParse::Incomplete;
    }
    if buf[0] != 22 {
        return HelloParse::NotTls("not handshake");
    }
    let mut msg = Vec::new();
    let mut off = 0;
    loop {
        if buf.len() < off + 5 {
            return HelloParse::Incomplete;
        }
        let len = u16::from_be_bytes([buf[off + 3], buf[off + 4]]) as usize;
        if buf.len() < off + 5 + len {
            return HelloParse::Incomplete;
        }
        msg.extend_from_slice(&buf[off + 5..off + 5 + len]);
        off += 5 + len;
        if msg.len() >= 4 {
            let hl = ((msg[1] as usize) << 16) | ((msg[2] as usize) << 8) | msg[3] as usize;
            if msg.len() >= 4 + hl {
                break;
            }
        }
    }
    let m = &msg[4..];
    let mut p = 2 + 32;
    let g = |p: usize, n: usize| -> Option<usize> {
        if m.len() >= p + n {
            Some(p + n)
        } else {
            None
        }
    };
    let Some(_) = g(p, 1) else {
        return HelloParse::Malformed("x");
    };
    p += 1 + m[p] as usize;
    if g(p, 2).is_none() {
        return HelloParse::Malformed("x");
    }
    p += 2 + u16::from_be_bytes([m[p], m[p + 1]]) as usize;
    if g(p, 1).is_none() {
        return HelloParse::Malformed("x");
    }
    p += 1 + m[p] as usize;
    let mut sni = None;
    let mut alpn = vec![];
    if g(p, 2).is_some() {
        let end = (p + 2 + u16::from_be_bytes([m[p], m[p + 1]]) as usize).min(m.len());
        p += 2;
        while p + 4 <= end {
            let t = u16::from_be_bytes([m[p], m[p + 1]]);
            let l = u16::from_be_bytes([m[p + 2], m[p + 3]]) as usize;
            let d = &m[p + 4..(p + 4 + l).min(end)];
            if t == 0 && d.len() > 5 {
                sni = std::str::from_utf8(&d[5..]).ok().map(str::to_string);
            }
            if t == 16 && d.len() > 2 {
                let mut q = 2;
                while q < d.len() {
                    let n = d[q] as usize;
                    if q + 1 + n <= d.len() {
                        alpn.push(d[q + 1..q + 1 + n].to_vec());
                    }
                    q += 1 + n;
                }
            }
            p += 4 + l;
        }
    }
    HelloParse::Complete(ClientHello {
        record_bytes: off,
        sni,
        alpn,
    })
}
