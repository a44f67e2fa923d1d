//! Reading a relayed broker connection (hub and spoke) without holding a buffer while it
//! is idle: a relayed connection mostly waits, and a buffer per connection would be most
//! of what it costs. A read waits until the socket is readable, then copies what is there
//! (at most [`CHUNK`] bytes) out of a buffer that lives only for that copy.

use tokio::net::tcp::OwnedReadHalf;

/// The most bytes one read takes (one relayed frame).
pub const CHUNK: usize = 16 * 1024;

/// The next bytes of `from`, `None` at its end. Cancel-safe: nothing is read before the
/// socket is readable, and a read once started completes without waiting.
pub async fn read_chunk(from: &OwnedReadHalf) -> std::io::Result<Option<Vec<u8>>> {
    loop {
        from.readable().await?;
        let mut chunk = [0u8; CHUNK];
        match from.try_read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => return Ok(Some(chunk[..n].to_vec())),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    #[tokio::test]
    async fn bytes_come_in_chunks_then_the_end() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (reader, _) = listener.accept().await.unwrap();
        let (from, _to) = reader.into_split();
        let sent: Vec<u8> = (0..40_000).map(|i| (i % 251) as u8).collect();
        writer.write_all(&sent).await.unwrap();
        writer.shutdown().await.unwrap();
        let mut got = Vec::new();
        while let Some(chunk) = read_chunk(&from).await.unwrap() {
            assert!(!chunk.is_empty() && chunk.len() <= CHUNK);
            got.extend(chunk);
        }
        assert_eq!(got, sent);
    }

    #[test]
    fn an_idle_read_holds_no_buffer() {
        // The future of a read that waits is small: the chunk is not part of it.
        fn size<F: std::future::Future>(_: &F) -> usize {
            std::mem::size_of::<F>()
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let _writer = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (reader, _) = listener.accept().await.unwrap();
            let (from, _to) = reader.into_split();
            assert!(
                size(&read_chunk(&from)) < 1024,
                "{}",
                size(&read_chunk(&from))
            );
        });
    }
}
