"""What tests/agent's receivers share: keeping what they were sent, and listening."""
import json
import os


def save(out, suffix, body, meta):
    """Writes OUT/NNNNNN<suffix> (the body) and OUT/NNNNNN.json (meta), each whole or not at all,
    NNNNNN counting from where the directory left off (a receiver restarted on the same
    directory continues the numbering)."""
    n = len([f for f in os.listdir(out) if f.endswith('.json')])
    base = os.path.join(out, f'{n:06d}')
    with open(base + suffix + '.tmp', 'wb') as f:
        f.write(body)
    os.rename(base + suffix + '.tmp', base + suffix)
    with open(base + '.json.tmp', 'w') as f:
        json.dump(meta, f)
    os.rename(base + '.json.tmp', base + '.json')


def serve(srv, port_file):
    """Says the port (in port_file, written whole, when given), then serves until killed."""
    if port_file:
        with open(port_file + '.tmp', 'w') as f:
            f.write(str(srv.server_address[1]))
        os.rename(port_file + '.tmp', port_file)
    print('listening', srv.server_address[1], flush=True)
    srv.serve_forever()
