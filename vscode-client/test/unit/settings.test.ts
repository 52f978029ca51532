/**
 * Unit tests of the pure settings code: VS Code settings to the server's
 * command line and configuration, validation, and what a change needs.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import {
  changeAction,
  CLIENT_SETTINGS,
  expandHome,
  findExecutable,
  MACHINE_SETTINGS,
  modelFilePath,
  readSettings,
  SERVER_SETTINGS,
  serverConfiguration,
  serverLaunch,
  type ClientSettings,
} from '../../src/settings';

const here = path.resolve(__dirname, '..', '..', '..');
const repoRoot = path.resolve(here, '..');

function settingsFrom(values: Record<string, unknown>): ReturnType<typeof readSettings> {
  return readSettings((key) => values[key]);
}

function base(overrides: Partial<ClientSettings> = {}): ClientSettings {
  return { enable: true, serverPath: '', pythonPath: '', server: {}, ...overrides };
}

/** The fields of the server's Settings dataclass, camelCased, read from config.py. */
function serverFieldsFromPython(): string[] {
  const source = fs.readFileSync(path.join(repoRoot, 'server', 'structspec', 'config.py'), 'utf8');
  const body = source.split('class Settings:')[1]?.split('\n    def ')[0] ?? '';
  const names = [...body.matchAll(/^ {4}([a-z_]+): /gm)].map((m) => m[1] ?? '');
  return names.map((n) => n.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()));
}

describe('names mirror the server', () => {
  test('every Settings field of config.py is a server setting, in order', () => {
    const fromPython = serverFieldsFromPython();
    assert.ok(fromPython.length >= 10, `parsed ${fromPython.join(',')}`);
    assert.deepEqual(SERVER_SETTINGS.map((s) => s.key), fromPython);
  });

  test('package.json contributes exactly structspec.<server setting> plus the client ones', () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8')) as {
      contributes: { configuration: { properties: Record<string, unknown> } };
    };
    const keys = Object.keys(manifest.contributes.configuration.properties).sort();
    const expected = [...SERVER_SETTINGS.map((s) => s.key), ...CLIENT_SETTINGS].map((k) => `structspec.${k}`).sort();
    assert.deepEqual(keys, expected);
  });

  test('file paths are machine-overridable settings, the rest are not', () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8')) as {
      contributes: { configuration: { properties: Record<string, { scope?: string }> } };
    };
    for (const [key, prop] of Object.entries(manifest.contributes.configuration.properties)) {
      const machine = (MACHINE_SETTINGS as readonly string[]).includes(key.slice('structspec.'.length));
      assert.equal(prop.scope === 'machine-overridable', machine, key);
    }
  });

  test('integer bounds match the server bounds in config.py', () => {
    const source = fs.readFileSync(path.join(repoRoot, 'server', 'structspec', 'config.py'), 'utf8');
    for (const spec of SERVER_SETTINGS.filter((s) => s.kind === 'integer')) {
      const snake = spec.key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
      const m = new RegExp(`"${snake}": \\(([\\d_]+), ([\\d_]+)\\)`).exec(source);
      assert.ok(m, `no bounds for ${snake}`);
      assert.equal(spec.min, Number((m[1] ?? '').replace(/_/g, '')), snake);
      assert.equal(spec.max, Number((m[2] ?? '').replace(/_/g, '')), snake);
    }
  });
});

describe('readSettings', () => {
  test('unset settings are left to the server', () => {
    const { settings, errors } = settingsFrom({});
    assert.deepEqual(errors, []);
    assert.deepEqual(settings, base());
    assert.deepEqual(serverConfiguration(settings), {});
  });

  test('explicit values are validated and kept', () => {
    const { settings, errors } = settingsFrom({
      model: ' ~/models/a.gguf ',
      threads: 4,
      contextSize: 2048,
      maxTokens: 64,
      maxLatencyMs: 800,
      debounceMs: 0,
      languages: ['python', ' typescript ', ''],
      sources: ['lookup', 'motif'],
      prefixReuse: false,
      speculative: true,
      serverPath: ' /opt/bin/structspec-lsp ',
      enable: false,
    });
    assert.deepEqual(errors, []);
    assert.equal(settings.enable, false);
    assert.equal(settings.serverPath, '/opt/bin/structspec-lsp');
    assert.deepEqual(serverConfiguration(settings), {
      model: '~/models/a.gguf',
      threads: 4,
      contextSize: 2048,
      maxTokens: 64,
      maxLatencyMs: 800,
      debounceMs: 0,
      languages: ['python', 'typescript'],
      sources: ['lookup', 'motif'],
      prefixReuse: false,
      speculative: true,
    });
  });

  test('bad values are reported and left out, never thrown', () => {
    const { settings, errors } = settingsFrom({
      threads: 0,
      maxTokens: 1.5,
      debounceMs: '60',
      languages: 'python',
      sources: 'lookup',
      prefixReuse: 'yes',
      model: 42,
      enable: 'no',
      pythonPath: ['python3'],
    });
    assert.deepEqual(serverConfiguration(settings), {});
    assert.equal(settings.enable, true);
    assert.equal(settings.pythonPath, '');
    assert.equal(errors.length, 9, errors.join('\n'));
    assert.match(errors.join('\n'), /structspec\.threads must be between 1 and 256, not 0/);
    assert.match(errors.join('\n'), /structspec\.sources must be a list of strings/);
  });

  test('source names are passed on as they are: the server knows its sources', () => {
    const { settings, errors } = settingsFrom({ sources: ['lookup', 'telepathy'] });
    assert.deepEqual(errors, []);
    assert.deepEqual(serverConfiguration(settings), { sources: ['lookup', 'telepathy'] });
  });

  test('~ in file paths is expanded when a home is given', () => {
    const s = base({ server: { model: '~/m.gguf', rulesFile: '~/r.json.gz', languages: ['~x'] } });
    const c = serverConfiguration(s, '/home/u');
    assert.equal(c.model, path.join('/home/u', 'm.gguf'));
    assert.equal(c.rulesFile, path.join('/home/u', 'r.json.gz'));
    assert.deepEqual(c.languages, ['~x']);
  });

  test('null means unset', () => {
    const { settings, errors } = settingsFrom({ threads: null, languages: null });
    assert.deepEqual(errors, []);
    assert.deepEqual(serverConfiguration(settings), {});
  });
});

describe('serverLaunch', () => {
  test('PATH by default, with --stdio only', () => {
    assert.deepEqual(serverLaunch(base()), { command: 'structspec-lsp', args: ['--stdio'], origin: 'PATH' });
  });

  test('process settings become flags; the rest stay configuration', () => {
    const s = base({ server: { model: '~/m.gguf', threads: 2, contextSize: 1024, maxTokens: 9 } });
    const launch = serverLaunch(s, '/home/u/m.gguf');
    assert.deepEqual(launch.args, ['--stdio', '--model', '/home/u/m.gguf', '--threads', '2']);
    assert.equal(serverConfiguration(s).contextSize, 1024);
  });

  test('serverPath wins over pythonPath; pythonPath runs the module', () => {
    assert.deepEqual(serverLaunch(base({ serverPath: '/x/lsp', pythonPath: '/usr/bin/python3' })).command, '/x/lsp');
    const py = serverLaunch(base({ pythonPath: '/usr/bin/python3', server: { model: 'standin' } }));
    assert.deepEqual(py, {
      command: '/usr/bin/python3',
      args: ['-m', 'structspec.lsp', '--stdio', '--model', 'standin'],
      origin: 'pythonPath',
    });
  });

  test('an empty model is the default model: no flag', () => {
    assert.deepEqual(serverLaunch(base({ server: { model: '' } })).args, ['--stdio']);
  });
});

describe('modelFilePath', () => {
  test('default and stand-in models are not files', () => {
    for (const m of [undefined, '', 'standin', 'standin:7']) {
      assert.equal(modelFilePath(m, '/home/u', '/ws'), undefined);
    }
  });
  test('home and relative paths are resolved', () => {
    assert.equal(modelFilePath('~/a.gguf', '/home/u', '/ws'), path.join('/home/u', 'a.gguf'));
    assert.equal(modelFilePath('models/a.gguf', '/home/u', '/ws'), path.resolve('/ws', 'models/a.gguf'));
    assert.equal(modelFilePath('/abs/a.gguf', '/home/u', '/ws'), '/abs/a.gguf');
    assert.equal(expandHome('~', '/h'), '/h');
  });
});

describe('changeAction', () => {
  test('process settings restart, the rest reconfigure', () => {
    assert.equal(changeAction(base(), base()), 'none');
    assert.equal(changeAction(base(), base({ server: { model: 'standin' } })), 'restart');
    assert.equal(changeAction(base(), base({ server: { threads: 3 } })), 'restart');
    assert.equal(changeAction(base(), base({ server: { contextSize: 512 } })), 'restart');
    assert.equal(changeAction(base(), base({ server: { rulesFile: '/r.json.gz' } })), 'configure');
    assert.equal(changeAction(base(), base({ serverPath: '/x' })), 'restart');
    assert.equal(changeAction(base(), base({ pythonPath: '/py' })), 'restart');
    assert.equal(changeAction(base(), base({ server: { maxTokens: 3 } })), 'configure');
    assert.equal(changeAction(base({ server: { languages: ['go'] } }), base({ server: { languages: ['go', 'c'] } })), 'configure');
    // Unset: configure only when the server did not start with it (else see 'taking a setting back').
    assert.equal(changeAction(base({ server: { speculative: true } }), base(), base()), 'configure');
  });
  test('enable starts and stops; nothing happens while off', () => {
    assert.equal(changeAction(base(), base({ enable: false })), 'stop');
    assert.equal(changeAction(base({ enable: false }), base()), 'start');
    assert.equal(changeAction(base({ enable: false }), base({ enable: false, server: { model: 'x' } })), 'none');
  });
});

describe('findExecutable', () => {
  const exists = (set: string[]) => (p: string) => set.includes(p);
  test('searches PATH in order', () => {
    const found = findExecutable('structspec-lsp', '/a:/b:/c', exists(['/b/structspec-lsp', '/c/structspec-lsp']), 'linux');
    assert.equal(found, '/b/structspec-lsp');
  });
  test('a path is taken as is', () => {
    assert.equal(findExecutable('/x/y', '/a', exists(['/x/y']), 'linux'), '/x/y');
    assert.equal(findExecutable('./y', '/a', exists([]), 'linux'), undefined);
  });
  test('missing PATH or executable is undefined', () => {
    assert.equal(findExecutable('structspec-lsp', undefined, exists([]), 'linux'), undefined);
  });
  test('Windows uses PATHEXT', () => {
    const found = findExecutable('structspec-lsp', 'C:\\py\\Scripts', exists([path.join('C:\\py\\Scripts', 'structspec-lsp.EXE')]), 'win32', '.EXE;.CMD');
    assert.equal(found, path.join('C:\\py\\Scripts', 'structspec-lsp.EXE'));
  });
});
