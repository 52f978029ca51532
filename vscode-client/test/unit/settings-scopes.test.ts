/** Settings defects: scopes, executable paths, taking a setting back. */
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import * as settingsModule from '../../src/settings';
import { changeAction, readSettings, serverLaunch, type ClientSettings } from '../../src/settings';

function base(overrides: Partial<ClientSettings> = {}): ClientSettings {
  return { enable: true, serverPath: '', pythonPath: '', server: {}, ...overrides };
}

describe('scopes', () => {
  test('a workspace null (the server\'s value) overrides a user value, as in VS Code', () => {
    const explicitValue = (settingsModule as Record<string, unknown>).explicitValue as ((i: object) => unknown) | undefined;
    assert.equal(typeof explicitValue, 'function', 'settings.ts has no explicitValue(inspect) to read the most specific scope');
    const inspect: Record<string, object> = { threads: { globalValue: 4, workspaceValue: null } };
    const { settings } = readSettings((key) => explicitValue!(inspect[key] ?? {}));
    assert.equal(settings.server.threads, undefined);
    assert.equal(explicitValue!({ globalValue: 4 }), 4);
    assert.equal(explicitValue!({ globalValue: 4, workspaceValue: 2, workspaceFolderValue: null }), null);
  });
});

describe('executable settings', () => {
  const home = path.resolve('/home/u');
  const ws = path.resolve('/ws');
  test('~ in serverPath and pythonPath is expanded, like the model and rules file', () => {
    assert.equal(serverLaunch(base({ serverPath: '~/.local/bin/structspec-lsp' }), undefined, home, ws).command, path.join(home, '.local/bin/structspec-lsp'));
    assert.equal(serverLaunch(base({ pythonPath: '~/venv/bin/python' }), undefined, home, ws).command, path.join(home, 'venv/bin/python'));
  });
  test('a relative path is the workspace folder\'s; a bare name is still looked up on PATH', () => {
    assert.equal(serverLaunch(base({ pythonPath: '.venv/bin/python' }), undefined, home, ws).command, path.join(ws, '.venv/bin/python'));
    assert.equal(serverLaunch(base({ pythonPath: 'python3' }), undefined, home, ws).command, 'python3');
    assert.equal(serverLaunch(base({ serverPath: '/opt/s' }), undefined, home, ws).command, '/opt/s');
  });
});

describe('taking a setting back', () => {
  // The server layers didChangeConfiguration over initializationOptions and
  // skips absent keys: a value it started with stays until a new process.
  const started = base({ server: { maxTokens: 64, speculative: false } });
  test('unsetting a setting the server started with restarts it', () => {
    assert.equal(changeAction(started, base({ server: { speculative: false } }), started), 'restart');
    assert.equal(changeAction(started, base({ server: { maxTokens: 64 } })), 'restart');
  });
  test('changing it, or unsetting one set later, is still a configuration change', () => {
    assert.equal(changeAction(started, base({ server: { maxTokens: 32, speculative: false } }), started), 'configure');
    const later = base({ server: { maxTokens: 64, speculative: false, debounceMs: 50 } });
    assert.equal(changeAction(later, started, started), 'configure');
  });
});
