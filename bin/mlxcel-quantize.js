#!/usr/bin/env node
import '../dist/quantize-cli.js';
