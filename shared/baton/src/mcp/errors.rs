//! MCP failures in one sentence a person can act on: what could not be reached, why (the root
//! cause, never a Rust type name) and the likely fix. Two audiences: the operator reads start-up
//! errors and logs, which name the server and its address; the model and the end user's stream
//! read a call's error, which names the server but never its address.

use std::error::Error;

/// How a server is reached, as named in a start-up error: its URL, or its command.
pub(crate) enum Where<'a> {
    Url(&'a str),
    Command(&'a str),
}

/// The innermost cause of `error`, in words: an I/O error by its kind ("connection refused"),
/// else the innermost message. rmcp's outer messages name its generic types
/// (`WorkerTransport<…>`); the innermost one is the operating system's or the peer's.
pub(crate) fn root_cause(error: &(dyn Error + 'static)) -> String {
    let mut innermost = error;
    let mut io = None;
    let mut at = Some(error);
    while let Some(e) = at {
        if let Some(found) = e.downcast_ref::<std::io::Error>() {
            io = Some(found);
        }
        innermost = e;
        at = e.source();
    }
    match io {
        Some(io) if io.kind() != std::io::ErrorKind::Other => io.kind().to_string(),
        _ => without_type_names(&innermost.to_string()),
    }
}

/// Whether `error` says the connection was refused: the request never reached the server.
pub(crate) fn refused(error: &(dyn Error + 'static)) -> bool {
    let mut at = Some(error);
    while let Some(e) = at {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        at = e.source();
    }
    false
}

/// `message` with any `Name<…>` generic type spelled out by a library cut away (kept as is when
/// it has none).
fn without_type_names(message: &str) -> String {
    let (Some(open), Some(close)) = (message.find('<'), message.rfind('>')) else {
        return message.to_owned();
    };
    if close < open {
        return message.to_owned();
    }
    let start =
        message[..open].rfind(|c: char| !(c.is_alphanumeric() || c == ':' || c == '_')).map_or(0, |i| i + 1);
    let joined = format!("{}{}", &message[..start], &message[close + 1..]);
    joined.split_whitespace().collect::<Vec<_>>().join(" ").replace(": :", ":")
}

/// The start-up error of server `server` reached at `at`, failed with `cause`.
pub(crate) fn not_started(server: &str, at: Where<'_>, cause: &str) -> String {
    match at {
        Where::Url(url) => {
            let fix = if cause.contains("401") || cause.contains("403") {
                "check the credentials in its `headers`"
            } else if cause.contains("404") {
                "check the path of its `url`"
            } else {
                "is it running?"
            };
            format!("could not reach MCP server `{server}` at {url}: {cause}; {fix}")
        }
        Where::Command(command) => {
            let fix = if cause.contains("not found") {
                "is it installed and on the PATH?"
            } else {
                "run the command by hand to see its own error"
            };
            format!("could not start MCP server `{server}` (`{command}`): {cause}; {fix}")
        }
    }
}

/// What the model and the end user read when server `server` could not be reached for a call
/// (the call was not sent): no address.
pub(crate) fn unreachable(server: &str) -> String {
    format!("MCP server `{server}` could not be reached, so the call was not made; try again later")
}

/// What the model and the end user read when the connection broke after the call was sent:
/// the server may have acted, so the call is not sent again.
pub(crate) fn outcome_unknown(server: &str) -> String {
    format!(
        "the connection to MCP server `{server}` broke before it answered; the call may have run, \
         so it was not sent again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_cause_is_named_by_its_kind() {
        #[derive(Debug, thiserror::Error)]
        #[error("WorkerTransport<rmcp::Foo<reqwest::Client>> error: {0}")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(root_cause(&e), "connection refused");
        assert!(refused(&e));
    }

    #[test]
    fn a_generic_type_name_is_cut_from_a_message() {
        let cut = without_type_names("Transport error: WorkerTransport<rmcp::X<reqwest::Client>>: closed");
        assert!(!cut.contains('<') && cut.contains("closed"), "{cut}");
        assert_eq!(without_type_names("plain words"), "plain words");
    }

    #[test]
    fn sentences_name_the_server_and_the_fix() {
        let http = not_started("hotels", Where::Url("http://127.0.0.1:1/mcp"), "connection refused");
        assert_eq!(
            http,
            "could not reach MCP server `hotels` at http://127.0.0.1:1/mcp: connection refused; is it running?"
        );
        let stdio = not_started("fs", Where::Command("mcp-fs"), "entity not found");
        assert!(stdio.contains("`fs`") && stdio.ends_with("is it installed and on the PATH?"), "{stdio}");
        assert!(!unreachable("hotels").contains("http") && unreachable("hotels").contains("`hotels`"));
        assert!(outcome_unknown("hotels").contains("not sent again"));
    }
}
