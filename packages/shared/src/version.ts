/** Spillway's version, sent as `user-agent: Spillway/<version>`. Keep in step with package.json. */
export const VERSION = '0.1.0';
