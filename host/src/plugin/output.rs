//! What a guest writes to stdout and stderr, kept in a bounded ring buffer per instance:
//! the tail (a panic message, a Python traceback) is attached to the error of a call that
//! fails and logged; a guest that prints without end costs at most the buffer.

use bytes::Bytes;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// The bytes of output kept per instance (the newest).
pub const GUEST_OUTPUT_BYTES: usize = 4096;

/// The largest write a guest is granted at once (anything is accepted; the oldest bytes
/// are dropped).
const WRITE_PERMIT: usize = 64 << 10;

/// A guest's stdout and stderr, together.
#[derive(Debug, Clone, Default)]
pub(crate) struct GuestOutput(Arc<Mutex<VecDeque<u8>>>);

impl GuestOutput {
    fn push(&self, bytes: &[u8]) {
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let keep = &bytes[bytes.len().saturating_sub(GUEST_OUTPUT_BYTES)..];
        let over = (ring.len() + keep.len()).saturating_sub(GUEST_OUTPUT_BYTES);
        let drop = over.min(ring.len());
        ring.drain(..drop);
        ring.extend(keep);
    }

    /// What was written since the last `take`, as text (invalid UTF-8 replaced).
    pub fn take(&self) -> String {
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if ring.is_empty() {
            return String::new();
        }
        let bytes: Vec<u8> = ring.drain(..).collect();
        String::from_utf8_lossy(&bytes).trim_end().to_string()
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

#[wasmtime_wasi::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(WRITE_PERMIT)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_bytes_within_its_bound() {
        let out = GuestOutput::default();
        out.push(b"hello ");
        out.push(b"world\n");
        assert_eq!(out.take(), "hello world");
        assert_eq!(out.take(), "", "taken");
        let long = vec![b'a'; GUEST_OUTPUT_BYTES * 3];
        out.push(&long);
        out.push(b"panicked at src/lib.rs:3");
        let text = out.take();
        assert_eq!(text.len(), GUEST_OUTPUT_BYTES);
        assert!(text.ends_with("panicked at src/lib.rs:3"), "{text}");
    }
}
