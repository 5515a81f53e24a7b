// The AI SDK's chat for examples/ai-sdk.html: `npm run build` bundles this module into
// dist/ai-sdk.js, a browser ES module the page imports. AbstractChat is the engine of useChat
// (React's useChat is AbstractChat with React state); the page gives it a plain state of its own.
export { AbstractChat, DefaultChatTransport } from "ai";
