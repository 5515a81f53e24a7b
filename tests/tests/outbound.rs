//! The outgoing HTTP client of streamed answers (`baton::outbound`) on its cleartext HTTP/1.1
//! path, against a loopback server that writes raw HTTP: connections kept and reused, one the
//! server closed while idle replaced, a body cut off, a body dropped early, redirects, URL
//! credentials, a read's frames handed over without waiting for another task, and the framing
//! the transport decodes itself (interim answers, lengths, chunk extensions and trailers,
//! `connection: close`, heads that are not HTTP or never end).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baton::outbound::Client;
use futures::{FutureExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Clone)]
struct Answer {
    /// The raw bytes written after the request (head and body).
    bytes: Vec<u8>,
    /// Close the connection this long after writing them (without saying so in a header).
    close: Option<Duration>,
}

/// Keeps the connection open after `bytes`.
fn keep(bytes: Vec<u8>) -> Answer {
    Answer { bytes, close: None }
}

/// A chunked `text/event-stream` answer with `frames` frames, every chunk in one write.
fn sse(frames: usize) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for i in 0..frames {
        let frame = format!("data: {{\"n\":{i}}}\n\n");
        out.extend_from_slice(format!("{:x}\r\n{frame}\r\n", frame.len()).as_bytes());
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A loopback server answering its n-th request (over all connections) with `answers[n]` (the
/// last one repeats). Returns its URL and its count of accepted connections.
async fn server(answers: Vec<Answer>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/stream?x=1", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(answers);
    let accepted = connections.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            accepted.fetch_add(1, Ordering::SeqCst);
            let (answers, served) = (answers.clone(), served.clone());
            tokio::spawn(async move { serve(socket, &answers, &served).await });
        }
    });
    (url, connections)
}

async fn serve(mut socket: TcpStream, answers: &[Answer], served: &AtomicUsize) {
    let mut buffer = Vec::new();
    loop {
        // One request: the head, then `content-length` bytes of body.
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        assert!(head.starts_with("post /v1/stream?x=1 http/1.1\r\n"), "origin-form request line: {head}");
        assert!(head.contains("\r\nhost: 127.0.0.1:"), "a Host header: {head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        buffer.drain(..head_end + length);
        let n = served.fetch_add(1, Ordering::SeqCst);
        let answer = &answers[n.min(answers.len() - 1)];
        if socket.write_all(&answer.bytes).await.is_err() {
            return;
        }
        if let Some(after) = answer.close {
            tokio::time::sleep(after).await;
            return;
        }
    }
}

fn client() -> Client {
    Client::new(Duration::from_secs(2), false).unwrap()
}

/// Sends one request and reads its body to the end: the bytes, or the error's text.
async fn call(client: &Client, url: &str) -> Result<String, String> {
    let sent = tokio::time::timeout(Duration::from_secs(5), client.send(client.post(url).body("{\"q\":1}")));
    let response = sent.await.expect("bounded").map_err(|e| e.to_string())?;
    assert_eq!(response.status(), 200);
    let mut body = std::pin::pin!(response.bytes_stream());
    let mut text = String::new();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(5), body.next()).await.expect("bounded")
    {
        text.push_str(std::str::from_utf8(&chunk.map_err(|e| e.to_string())?).unwrap());
    }
    Ok(text)
}

#[tokio::test]
async fn sequential_calls_reuse_one_connection() {
    let (url, connections) = server(vec![keep(sse(3))]).await;
    let client = client();
    for _ in 0..5 {
        let text = call(&client, &url).await.unwrap();
        assert_eq!(text.matches("data: ").count(), 3, "{text}");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1, "five calls, one after the other, one connection");
}

#[tokio::test]
async fn the_pool_keeps_at_most_its_cap_of_idle_connections_per_host() {
    let (url, connections) = server(vec![keep(sse(1))]).await;
    let client = client();
    let cap = baton::outbound::MAX_IDLE_CONNECTIONS_PER_HOST;
    let burst = cap + 8;
    for round in 1..=2 {
        // `burst` answers open at once (each holds its connection), then each read to its end.
        let sends = (0..burst).map(|_| client.send(client.post(&url).body("{}")));
        let responses: Vec<_> =
            futures::future::join_all(sends).await.into_iter().map(Result::unwrap).collect();
        for response in responses {
            let chunks: Vec<_> = response.bytes_stream().collect().await;
            assert!(chunks.iter().all(Result::is_ok));
        }
        // The first burst opens one connection per answer; the second reuses the `cap` kept.
        let expected = if round == 1 { burst } else { burst + (burst - cap) };
        assert_eq!(connections.load(Ordering::SeqCst), expected, "after burst {round}");
    }
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_replaced() {
    // The server closes each connection 10 ms after its answer, without `connection: close`:
    // the client keeps it, and must find it closed when the next call takes it out.
    let (url, connections) =
        server(vec![Answer { bytes: sse(2), close: Some(Duration::from_millis(10)) }]).await;
    let client = client();
    for _ in 0..3 {
        let text = call(&client, &url).await.unwrap();
        assert_eq!(text.matches("data: ").count(), 2);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_request_the_server_hangs_up_on_is_sent_again_on_a_new_connection() {
    // The kept connection is open when the second call takes it out; the server reads that
    // request and hangs up without a word (an idle timeout racing the request). No answer came,
    // so the request goes once more on a new connection, and the call succeeds.
    let hang_up = Answer { bytes: Vec::new(), close: Some(Duration::ZERO) };
    let (url, connections) = server(vec![keep(sse(2)), hang_up, keep(sse(3))]).await;
    let client = client();
    assert_eq!(call(&client, &url).await.unwrap().matches("data: ").count(), 2);
    assert_eq!(call(&client, &url).await.unwrap().matches("data: ").count(), 3);
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_new_connection_that_gets_no_answer_is_an_error() {
    // Sent again only on a kept connection: on a new one the same hang-up is the answer.
    let hang_up = Answer { bytes: Vec::new(), close: Some(Duration::ZERO) };
    let (url, connections) = server(vec![hang_up]).await;
    let error = call(&client(), &url).await.unwrap_err();
    assert!(error.contains("request to http://127.0.0.1:"), "{error}");
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_cut_off_mid_chunk_is_an_error_not_an_end() {
    let mut cut = sse(3);
    cut.truncate(cut.len() - 20);
    let (url, _) = server(vec![Answer { bytes: cut, close: Some(Duration::ZERO) }]).await;
    let error = call(&client(), &url).await.unwrap_err();
    assert!(error.contains("the answer broke off"), "{error}");
}

#[tokio::test]
async fn a_body_dropped_before_its_end_closes_its_connection() {
    // The first answer is still going (no last chunk yet) when the caller drops it.
    let mut going = sse(2);
    going.truncate(going.len() - b"0\r\n\r\n".len());
    let (url, connections) = server(vec![keep(going), keep(sse(50))]).await;
    let client = client();
    let response = client.send(client.post(&url).body("{}")).await.unwrap();
    let mut body = Box::pin(response.bytes_stream());
    body.next().await.unwrap().unwrap();
    drop(body);
    // The half-read connection is not reused: the next call gets a new one, and a whole answer.
    let text = call(&client, &url).await.unwrap();
    assert_eq!(text.matches("data: ").count(), 50);
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_body_dropped_after_its_last_frame_keeps_its_connection() {
    // A caller stops at the answer's last frame (`[DONE]`), before the body's end: the end is
    // already here, so the connection is kept for the next call.
    let (url, connections) = server(vec![keep(sse(3))]).await;
    let client = client();
    for _ in 0..3 {
        let response = client.send(client.post(&url).body("{}")).await.unwrap();
        let mut body = Box::pin(response.bytes_stream());
        let mut text = String::new();
        while text.matches("data: ").count() < 3 {
            text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
        }
        drop(body);
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_that_ends_when_the_server_closes_is_read_whole() {
    // No length, not chunked: the body is whatever comes before the server closes.
    let until_close =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: 1\n\ndata: 2\n\n".to_vec();
    let (url, connections) = server(vec![Answer { bytes: until_close, close: Some(Duration::ZERO) }]).await;
    let client = client();
    for _ in 0..2 {
        assert_eq!(call(&client, &url).await.unwrap(), "data: 1\n\ndata: 2\n\n");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 2, "a connection its answer closed is not kept");
}

#[tokio::test]
async fn a_redirect_is_the_answer_not_followed() {
    let redirect = b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:1/elsewhere\r\ncontent-length: 0\r\n\r\n";
    let (url, connections) = server(vec![keep(redirect.to_vec())]).await;
    let client = client();
    let response = client.send(client.post(&url).body("{}")).await.unwrap();
    assert_eq!(response.status(), 307);
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn credentials_in_the_url_go_as_basic_auth() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://user:secret@{}/v1/stream?x=1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let mut chunk = [0u8; 4096];
            let n = socket.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the client hung up before its request's head");
            head.extend_from_slice(&chunk[..n]);
        }
        socket.write_all(&sse(1)).await.unwrap();
        String::from_utf8_lossy(&head).to_ascii_lowercase()
    });
    call(&client(), &url).await.unwrap();
    let head = tokio::time::timeout(Duration::from_secs(5), server).await.unwrap().unwrap();
    assert!(head.contains("\r\nauthorization: basic dxnlcjpzzwnyzxq=\r\n"), "{head}");
}

#[tokio::test]
async fn a_refused_connection_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let client = client();
    let error = client.send(client.post(format!("http://127.0.0.1:{port}/x"))).await.unwrap_err();
    assert!(error.is_connect() && !error.is_timeout(), "{error}");
    assert!(error.to_string().contains(&format!("127.0.0.1:{port}")), "{error}");
}

#[tokio::test(flavor = "current_thread")]
async fn the_frames_of_one_read_come_without_waiting_for_another_task() {
    // All 40 frames reach the socket at once. Once the first came, the rest are in the client's
    // buffers: each must be handed over on the spot (`now_or_never`, no other task runs), where
    // a connection driven by its own task hands over one chunk per switch.
    let (url, _) = server(vec![keep(sse(40))]).await;
    let client = client();
    let response = client.send(client.post(&url).body("{}")).await.unwrap();
    let mut body = Box::pin(response.bytes_stream());
    let mut text = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    // Let the rest of the answer land in the socket (one write on the server's side).
    tokio::time::sleep(Duration::from_millis(50)).await;
    loop {
        match body.next().now_or_never() {
            Some(Some(chunk)) => text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap()),
            Some(None) => break,
            None => panic!("frame {} was not handed over at once", text.matches("data: ").count()),
        }
    }
    assert_eq!(text.matches("data: ").count(), 40);
}

/// Three calls answered with `answer` read `body` each time, all on one connection.
async fn read_whole_on_one_connection(answer: &[u8], body: &str) {
    let (url, connections) = server(vec![keep(answer.to_vec())]).await;
    let client = client();
    for _ in 0..3 {
        assert_eq!(call(&client, &url).await.unwrap(), body);
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn interim_answers_are_skipped_and_a_length_body_keeps_its_connection() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
HTTP/1.1 200 OK\r\ncontent-length: 18\r\n\r\ndata: 1\n\ndata: 2\n\n";
    read_whole_on_one_connection(answer, "data: 1\n\ndata: 2\n\n").await;
}

#[tokio::test]
async fn chunk_extensions_and_trailers_are_read_and_the_connection_kept() {
    let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
9;name=value\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\nx-checksum: abc\r\nx-more: 1\r\n\r\n";
    read_whole_on_one_connection(answer, "data: 1\n\ndata: 2\n\n").await;
}

#[tokio::test]
async fn a_connection_its_answer_says_to_close_or_that_sent_too_much_is_not_kept() {
    // The server keeps both connections open; the answers say not to reuse them.
    let close = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 9\r\n\r\ndata: 1\n\n";
    let too_much = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\ndata: 1\n\nHTTP/1.1 200 OK\r\n";
    for answer in [&close[..], &too_much[..]] {
        let (url, connections) = server(vec![keep(answer.to_vec())]).await;
        let client = client();
        for _ in 0..2 {
            assert_eq!(call(&client, &url).await.unwrap(), "data: 1\n\n");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 2, "{}", String::from_utf8_lossy(answer));
    }
}

#[tokio::test]
async fn a_large_body_is_read_whole_through_the_small_read_buffer() {
    let data: String = (0..20_000).map(|i| format!("data: {i:05}\n\n")).collect();
    let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", data.len()).into_bytes();
    answer.extend_from_slice(data.as_bytes());
    read_whole_on_one_connection(&answer, &data).await;
}

#[tokio::test]
async fn an_answer_that_is_not_http_or_whose_head_never_ends_is_a_clear_error() {
    let not_http = b"SSH-2.0-OpenSSH_9.6\r\n\r\n".to_vec();
    let (url, _) = server(vec![keep(not_http)]).await;
    let error = call(&client(), &url).await.unwrap_err();
    assert!(error.contains("request to http://127.0.0.1:") && error.contains("malformed"), "{error}");

    // A head that grows past its cap is refused as soon as it does, not waited on.
    let mut endless = b"HTTP/1.1 200 OK\r\nx-filler: ".to_vec();
    endless.resize(70 * 1024, b'a');
    let (url, _) = server(vec![keep(endless)]).await;
    let error = call(&client(), &url).await.unwrap_err();
    assert!(error.contains("over 65536 bytes"), "{error}");
}
