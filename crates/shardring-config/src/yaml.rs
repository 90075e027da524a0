//! A YAML reader that keeps every node's line and refuses what nutcracker's libyaml use refuses
//! (anchors, aliases, tags, flow collections, several documents), recording each problem instead of
//! stopping at the first.

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::Marker;

use super::problem::ConfigProblem;

/// A YAML node with the line it starts on.
#[derive(Debug)]
pub(super) enum Yaml {
    Scalar(String, usize),
    Seq(Vec<Yaml>, usize),
    Map(Vec<(Yaml, Yaml)>, usize),
    /// Something refused (alias); its problem is already recorded.
    Refused(usize),
}

impl Yaml {
    pub(super) fn line(&self) -> usize {
        match self {
            Yaml::Scalar(_, l) | Yaml::Seq(_, l) | Yaml::Map(_, l) | Yaml::Refused(l) => *l,
        }
    }
}

pub(super) struct Reader<'a> {
    text: &'a str,
    parser: Parser<std::str::Chars<'a>>,
    pub(super) problems: Vec<ConfigProblem>,
}

impl<'a> Reader<'a> {
    /// A reader of `text` with no problems yet.
    pub(super) fn new(text: &'a str) -> Reader<'a> {
        Reader {
            text,
            parser: Parser::new_from_str(text),
            problems: Vec::new(),
        }
    }

    pub(super) fn problem(
        &mut self,
        line: usize,
        key: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.problems.push(ConfigProblem {
            line,
            key: key.into(),
            message: message.into(),
        });
    }

    fn next(&mut self) -> Result<(Event, Marker), ConfigProblem> {
        self.parser.next_token().map_err(|e| ConfigProblem {
            line: e.marker().line(),
            key: String::new(),
            message: format!("YAML syntax error: {}", e.info()),
        })
    }

    /// The character at a marker, to tell flow collections (`[`, `{`) from block ones.
    fn char_at(&self, mark: &Marker) -> Option<char> {
        self.text
            .lines()
            .nth(mark.line().checked_sub(1)?)?
            .chars()
            .nth(mark.col())
    }

    fn check_collection(&mut self, mark: &Marker, anchor: usize, has_tag: bool) {
        if matches!(self.char_at(mark), Some('[' | '{')) {
            self.problem(
                mark.line(),
                "",
                "flow collections ([...], {...}) are not accepted",
            );
        }
        self.check_anchor_tag(mark.line(), anchor, has_tag);
    }

    fn check_anchor_tag(&mut self, line: usize, anchor: usize, has_tag: bool) {
        if anchor > 0 {
            self.problem(line, "", "anchors are not accepted");
        }
        if has_tag {
            self.problem(line, "", "tags are not accepted");
        }
    }

    /// Reads one node whose first event is `first`, nested `depth` deep.
    fn node(&mut self, first: (Event, Marker), depth: usize) -> Result<Yaml, ConfigProblem> {
        let (event, mark) = first;
        let line = mark.line();
        // nutcracker allows two levels (pool, key) plus the servers list; stop long before the stack
        // could be at risk from a hostile file.
        if depth > MAX_DEPTH {
            return Err(ConfigProblem {
                line,
                key: String::new(),
                message: format!("nested deeper than {MAX_DEPTH} levels"),
            });
        }
        match event {
            Event::Scalar(value, _, anchor, tag) => {
                self.check_anchor_tag(line, anchor, tag.is_some());
                Ok(Yaml::Scalar(value, line))
            }
            Event::Alias(_) => {
                self.problem(line, "", "aliases are not accepted");
                Ok(Yaml::Refused(line))
            }
            Event::SequenceStart(anchor, tag) => {
                self.check_collection(&mark, anchor, tag.is_some());
                let mut items = Vec::new();
                loop {
                    let next = self.next()?;
                    if next.0 == Event::SequenceEnd {
                        return Ok(Yaml::Seq(items, line));
                    }
                    items.push(self.node(next, depth + 1)?);
                }
            }
            Event::MappingStart(anchor, tag) => {
                self.check_collection(&mark, anchor, tag.is_some());
                let mut entries = Vec::new();
                loop {
                    let next = self.next()?;
                    if next.0 == Event::MappingEnd {
                        return Ok(Yaml::Map(entries, line));
                    }
                    let key = self.node(next, depth + 1)?;
                    let next = self.next()?;
                    let value = self.node(next, depth + 1)?;
                    entries.push((key, value));
                }
            }
            other => Err(ConfigProblem {
                line,
                key: String::new(),
                message: format!("unexpected YAML event {other:?}"),
            }),
        }
    }

    /// Reads the whole stream: the root node of its one document.
    pub(super) fn document(&mut self) -> Result<Option<Yaml>, ConfigProblem> {
        let mut root = None;
        let mut documents = 0;
        loop {
            let (event, mark) = self.next()?;
            match event {
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                Event::StreamEnd => break,
                Event::DocumentStart => {
                    documents += 1;
                    if documents == 2 {
                        self.problem(mark.line(), "", "must contain only 1 document");
                    }
                }
                other => {
                    let node = self.node((other, mark), 0)?;
                    if root.is_none() {
                        root = Some(node);
                    }
                }
            }
        }
        Ok(root)
    }
}

/// How deep the reader follows nested collections before giving up on the file.
const MAX_DEPTH: usize = 16;
