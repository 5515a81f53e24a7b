//! A team's Lambda function in Python (`examples/travel/cars_lambda.py`), run under `cargo lambda
//! watch` as the functions are: the emulator starts a workspace binary with the Lambda runtime's
//! environment (`AWS_LAMBDA_RUNTIME_API`, …), and this one hands it to a Python runtime speaking
//! the documented Lambda Runtime API (`tests/lambda/python_runtime.py`), which serves the handler
//! as Lambda's Python runtime does. `BATON_TOOL_PYTHON` names the interpreter (the test venv's).

use std::os::unix::process::CommandExt;

fn main() {
    let python = std::env::var("BATON_TOOL_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let error = std::process::Command::new(&python)
        .arg(format!("{root}/tests/lambda/python_runtime.py"))
        .arg("cars_lambda.handler")
        .current_dir(format!("{root}/examples/travel"))
        .exec();
    eprintln!("cannot start the Python runtime ({python}): {error}");
    std::process::exit(1);
}
