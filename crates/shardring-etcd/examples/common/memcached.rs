//! A minimal memcached text-protocol client for the client-side examples: one connection per server
//! address, `set` and `get`, nothing else (the examples show placement, not a client library).

use std::collections::HashMap;

use anyhow::{anyhow, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Connections to the memcached servers, by address.
#[derive(Default)]
pub struct Servers {
    conns: HashMap<String, BufReader<TcpStream>>,
}

impl Servers {
    async fn conn(&mut self, addr: &str) -> Result<&mut BufReader<TcpStream>> {
        if !self.conns.contains_key(addr) {
            let s = TcpStream::connect(addr)
                .await
                .with_context(|| format!("connecting to {addr}"))?;
            self.conns.insert(addr.to_string(), BufReader::new(s));
        }
        self.conns
            .get_mut(addr)
            .ok_or_else(|| anyhow!("no connection"))
    }

    /// Forgets every connection (after a failure: the next request connects again).
    #[allow(dead_code)] // one example of the two uses it
    pub fn reset(&mut self) {
        self.conns.clear();
    }

    /// `set key 0 0 <len>` on `addr`: the server's status line (`STORED`…).
    pub async fn set(&mut self, addr: &str, key: &str, value: &[u8]) -> Result<String> {
        let c = self.conn(addr).await?;
        let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        c.get_mut().write_all(&req).await?;
        let mut line = String::new();
        c.read_line(&mut line).await?;
        Ok(line.trim_end().to_string())
    }

    /// `get key` on `addr`: the value, `None` on a miss.
    pub async fn get(&mut self, addr: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let c = self.conn(addr).await?;
        c.get_mut()
            .write_all(format!("get {key}\r\n").as_bytes())
            .await?;
        let mut line = String::new();
        c.read_line(&mut line).await?;
        if line.starts_with("END") {
            return Ok(None);
        }
        let len: usize = line
            .split_whitespace()
            .nth(3)
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| anyhow!("{addr}: unexpected reply {line:?}"))?;
        let mut data = vec![0; len + 2];
        c.read_exact(&mut data).await?;
        data.truncate(len);
        line.clear();
        c.read_line(&mut line).await?; // END
        Ok(Some(data))
    }
}
