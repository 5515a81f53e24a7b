// The official AG-UI client for examples/agui.html: `npm run build` bundles this module (and the
// package it re-exports) into dist/agui.js, a browser ES module the page imports.
export { HttpAgent } from "@ag-ui/client";
