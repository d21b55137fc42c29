export interface ScenarioOptions {
  short: boolean;
  seed: number;
  log(msg: string): void;
}
