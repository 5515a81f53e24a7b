//! How the AWS SDK's failures read as [`StoreError`]s, for the store and the table's set-up.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use baton::store::StoreError;

/// Maps an SDK failure to a [`StoreError`]: transport failures, timeouts, throttling and 5xx
/// are `Unavailable`; the rest `Failed`. Conditional-check failures are handled by the callers.
pub(crate) fn sdk_error<E>(what: &str, e: SdkError<E>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let message = match &e {
        SdkError::TimeoutError(_) => {
            format!("{what}: DynamoDB did not answer within the operation timeout (retries included)")
        }
        SdkError::DispatchFailure(_) => format!("{what}: cannot reach DynamoDB: {}", DisplayErrorContext(&e)),
        _ => format!("{what}: {}", DisplayErrorContext(&e)),
    };
    let transient = match &e {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(ctx) => {
            ctx.raw().status().is_server_error()
                || matches!(
                    ctx.err().code(),
                    Some(
                        "ThrottlingException"
                            | "ProvisionedThroughputExceededException"
                            | "RequestLimitExceeded"
                            | "InternalServerError"
                            | "TransactionInProgressException"
                    )
                )
        }
        _ => false,
    };
    if transient { StoreError::Unavailable(message) } else { StoreError::Failed(message) }
}
