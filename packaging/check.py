#!/usr/bin/env python3
"""Checks packaging/ without a cluster: the DaemonSet example with yamllint and a structural
check of what Kubernetes would refuse or what would not work (selector and labels, volumes,
hostPID), every option it passes and every key of its configuration against the built agent
(`beam-bpf-agent --check`), and the systemd unit with `systemd-analyze verify` and the agent's
own check of packaging/agent.conf, its commented-out examples included.

  packaging/check.py [BUILD_DIR]      (default build/); exit 1 with one line per problem
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
problems = []


def problem(msg):
    problems.append(msg)
    print('packaging/check.py: ' + msg, file=sys.stderr)


def agent_check(agent, args, what):
    r = subprocess.run([agent, '--check'] + args, capture_output=True, text=True)
    if r.returncode != 0:
        problem(f'{what}: beam-bpf-agent --check {" ".join(args)}: {r.stderr.strip()}')
    # Warnings (a secret file others can read) are problems in an example.
    elif 'warning' in r.stderr and 'no such file' not in r.stderr.lower():
        problem(f'{what}: beam-bpf-agent --check {" ".join(args)}: {r.stderr.strip()}')


def check_daemonset(agent):
    path = os.path.join(HERE, 'kubernetes', 'beam-bpf-agent.yaml')
    r = subprocess.run(['yamllint', '-s', '-d', '{extends: default, rules: {line-length: {max: 120}, '
                        'document-start: disable}}', path], capture_output=True, text=True)
    if r.returncode != 0:
        problem(f'yamllint {path}:\n{r.stdout}{r.stderr}')
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by_kind = {d['kind']: d for d in docs}
    for d in docs:
        for key in ('apiVersion', 'kind', 'metadata'):
            if key not in d:
                problem(f'{d.get("kind")}: no {key}')
    ds = by_kind.get('DaemonSet')
    if not ds:
        return problem('no DaemonSet')
    if ds['apiVersion'] != 'apps/v1':
        problem(f'DaemonSet apiVersion {ds["apiVersion"]}: apps/v1')
    spec = ds['spec']
    sel = spec['selector']['matchLabels']
    labels = spec['template']['metadata']['labels']
    if any(labels.get(k) != v for k, v in sel.items()):
        problem(f'the selector {sel} does not select the template labels {labels}')
    pod = spec['template']['spec']
    if pod.get('hostPID') is not True:
        problem('hostPID must be true: the agent finds the VMs through the host /proc')
    volumes = {v['name']: v for v in pod.get('volumes', [])}
    for c in pod['containers']:
        for key in ('name', 'image'):
            if key not in c:
                problem(f'container without {key}')
        for m in c.get('volumeMounts', []):
            if m['name'] not in volumes:
                problem(f'volumeMount {m["name"]} names no volume')
        if not c.get('securityContext', {}).get('privileged') and not c.get('securityContext', {}).get('capabilities'):
            problem('the container has neither privileged nor capabilities: BPF cannot load')
        # The options, as the agent parses them; $(NODE_NAME) stands for a node name.
        args = [a.replace('$(NODE_NAME)', 'node-1') for a in c.get('args', [])]
        env = {e['name'] for e in c.get('env', [])}
        for a in c.get('args', []):
            if '$(' in a and a[a.index('$(') + 2:a.index(')')] not in env:
                problem(f'{a}: no such env variable in the container')
        with tempfile.TemporaryDirectory() as tmp:
            # The configuration names secrets (credentials): a Secret, mounted readable by its owner only.
            if any(v.get('configMap') for v in volumes.values()):
                problem('a ConfigMap volume: the configuration goes in a Secret (it names credentials)')
            cfg_mount = next((m for m in c.get('volumeMounts', []) if volumes.get(m['name'], {}).get('secret')), None)
            if cfg_mount:
                vol = volumes[cfg_mount['name']]['secret']
                if vol.get('defaultMode', 0o644) & 0o077:
                    problem(f'the Secret volume has defaultMode {oct(vol.get("defaultMode", 0o644))}: 0400 or 0600')
                secret = by_kind.get('Secret')
                if not secret or secret['metadata']['name'] != vol['secretName']:
                    problem(f'the Secret {vol["secretName"]} is not in the file')
                else:
                    for fname, text in secret['stringData'].items():
                        path = os.path.join(tmp, fname)
                        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), 'w') as f:
                            f.write(text.replace(cfg_mount['mountPath'], tmp))
                    args = [a.replace(cfg_mount['mountPath'], tmp) for a in args]
            args = [a.replace('/var/lib/beam-bpf', tmp) for a in args]
            agent_check(agent, args, 'the DaemonSet')


def check_systemd(agent):
    unit = os.path.join(HERE, 'beam-bpf-agent.service')
    with tempfile.TemporaryDirectory() as tmp:
        # verify wants the ExecStart binary to exist: check a copy that runs this build's agent.
        text = open(unit).read().replace('/usr/local/bin/beam-bpf-agent', os.path.abspath(agent))
        copy = os.path.join(tmp, 'beam-bpf-agent.service')
        open(copy, 'w').write(text)
        r = subprocess.run(['systemd-analyze', 'verify', copy], capture_output=True, text=True)
        # It exits 0 on a line it cannot parse (and ignores): any word about the unit file counts.
        out = '\n'.join(l for l in (r.stdout + r.stderr).splitlines() if copy in l)
        if r.returncode != 0 or out:
            problem(f'systemd-analyze verify: {out or r.stderr.strip()}')
    # What the agent writes is private whatever it is told; agent.conf is installed 0600.
    text = open(unit).read()
    for line in ('UMask=0077', 'StateDirectoryMode=0700', 'install -m 600 packaging/agent.conf'):
        if line not in text:
            problem(f'packaging/beam-bpf-agent.service: no "{line}"')
    agent_check(agent, ['--config', os.path.join(HERE, 'agent.conf'), '--output', tempfile.gettempdir()],
                'packaging/agent.conf')
    # Its commented-out examples too, each uncommented: a key the agent does not know is a typo.
    examples = [l[1:] for l in open(os.path.join(HERE, 'agent.conf')) if re.match(r'#[a-z][a-z.@0-9-]*=', l)]
    with tempfile.NamedTemporaryFile('w', suffix='.conf') as f:
        f.writelines(examples)
        f.flush()
        agent_check(agent, ['--config', f.name, '--output', tempfile.gettempdir()], 'the examples of packaging/agent.conf')


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', 'build')
    agent = os.path.join(build, 'beam-bpf-agent')
    check_daemonset(agent)
    check_systemd(agent)
    if problems:
        return 1
    print('packaging/check.py: the DaemonSet, the systemd unit and agent.conf pass')
    return 0


if __name__ == '__main__':
    sys.exit(main())
